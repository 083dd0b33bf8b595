//! Leader election against real ZooKeeper: the standalone shared server for the protocol, a
//! private three-member ensemble (started once, faults run one after another) for failures,
//! and Apache Curator's `LeaderLatch` for interoperability.
//!
//! Every leadership term is recorded as a `support::history` event of kind `Leader`: from
//! when `campaign` returned to just before `resign` was called or when `lost()` fired. The
//! checker then requires that no two terms overlap and that fencing tokens strictly increase.
//! Two terms of the fault test end earlier, as documented there: a process stopped with
//! SIGSTOP cannot act, so its term ends when it was stopped; a session killed by a third
//! party gives its owner no warning, so that term ends at the kill (the next leader's larger
//! token is checked instead).

mod support;

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use tokio::sync::watch;
use tokio::time::timeout;
use tokio_util::sync::CancellationToken;

use support::history::{check, monotonic_ns, node_sequence, Event, InteropLine, Kind};
use support::interop::{build_java, finish_all, Peer};
use zk_recipes::testing::{
    expire_session, shared_server, unique_root, FaultProxy, ZooKeeperCluster,
};
use zk_recipes::{Election, Error, LeaderChange, LeaderChanges, LossReason, Session};

/// Session timeout of every candidate (the harness servers accept 1 s to 10 s).
const SESSION_TIMEOUT: Duration = Duration::from_secs(4);
/// Bound on waits for things that take one or two round trips.
const QUICK: Duration = Duration::from_secs(10);
/// Bound on waits that include a session expiry, a server restart or a quorum election.
const SLOW: Duration = Duration::from_secs(40);

async fn connect(hosts: &str) -> Session {
    timeout(
        QUICK,
        Session::builder(hosts)
            .with_session_timeout(SESSION_TIMEOUT)
            .connect(),
    )
    .await
    .unwrap_or_else(|_| panic!("expected a session to {hosts} within {QUICK:?}, connect hung"))
    .unwrap_or_else(|e| panic!("expected a session to {hosts}, got {e}"))
}

/// Awaits `fut` for at most `limit`, panicking with `what` when it does not finish.
async fn within<F: std::future::Future>(limit: Duration, what: &str, fut: F) -> F::Output {
    match timeout(limit, fut).await {
        Ok(v) => v,
        Err(_) => panic!("expected {what} within {limit:?}; it did not happen"),
    }
}

// ------------------------------------------------------------------------------ candidates

/// What every in-process candidate reports to: the recorded terms and the current leader.
#[derive(Clone)]
struct Board {
    events: Arc<Mutex<Vec<Event>>>,
    /// The in-process candidate leading now: (name, fencing token, term number).
    leader: Arc<watch::Sender<Option<(String, i64, u64)>>>,
    errors: Arc<Mutex<Vec<String>>>,
}

impl Board {
    fn new() -> Board {
        Board {
            events: Arc::default(),
            leader: Arc::new(watch::channel(None).0),
            errors: Arc::default(),
        }
    }

    /// Waits until an in-process candidate other than `not` leads; returns (name, token).
    async fn wait_leader_other_than(&self, not: &str, limit: Duration) -> (String, i64) {
        let mut rx = self.leader.subscribe();
        let what = format!("a leader other than {not:?}");
        let seen = within(
            limit,
            &what,
            rx.wait_for(|l| l.as_ref().is_some_and(|(n, _, _)| n != not)),
        )
        .await;
        let (name, token, _) = seen.expect("board alive").clone().unwrap();
        (name, token)
    }

    /// Waits until some in-process candidate leads.
    async fn wait_any_leader(&self, limit: Duration) -> (String, i64) {
        self.wait_leader_other_than("", limit).await
    }

    fn current(&self) -> Option<(String, i64, u64)> {
        self.leader.borrow().clone()
    }
}

/// A candidate task on its own session: campaigns, announces its term on the board, and holds
/// until it is asked to resign, loses leadership, or is stopped; then campaigns again.
struct Candidate {
    name: String,
    session: Session,
    /// The term number up to which resignation is requested.
    resign: watch::Sender<u64>,
    terms: Arc<AtomicU64>,
    losses: Arc<AtomicU64>,
    stop: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

impl Candidate {
    async fn start(name: &str, hosts: &str, path: &str, board: &Board) -> Candidate {
        let session = connect(hosts).await;
        let election = Election::new(&session, path, name).unwrap();
        let (resign, mut resign_rx) = watch::channel(0u64);
        let terms = Arc::new(AtomicU64::new(0));
        let losses = Arc::new(AtomicU64::new(0));
        let stop = CancellationToken::new();
        let task = {
            let (name, board, terms, losses, stop) = (
                name.to_string(),
                board.clone(),
                terms.clone(),
                losses.clone(),
                stop.clone(),
            );
            tokio::spawn(async move {
                loop {
                    let campaign = tokio::select! {
                        _ = stop.cancelled() => return,
                        r = election.campaign() => r,
                    };
                    let leadership = match campaign {
                        Ok(l) => l,
                        Err(Error::Closed) => return,
                        Err(e) => {
                            board
                                .errors
                                .lock()
                                .unwrap()
                                .push(format!("{name}: campaign failed: {e}"));
                            tokio::time::sleep(Duration::from_millis(200)).await;
                            continue;
                        }
                    };
                    let acquired = monotonic_ns();
                    let token = leadership.fencing_token();
                    let term = terms.fetch_add(1, Ordering::SeqCst) + 1;
                    board.leader.send_replace(Some((name.clone(), token, term)));
                    enum End {
                        Lost,
                        Resign,
                        Stop,
                    }
                    let end = tokio::select! {
                        _ = leadership.lost() => End::Lost,
                        _ = resign_rx.wait_for(|r| *r >= term) => End::Resign,
                        _ = stop.cancelled() => End::Stop,
                    };
                    let released = monotonic_ns();
                    board.leader.send_if_modified(|l| {
                        let mine = l
                            .as_ref()
                            .is_some_and(|(n, t, _)| *n == name && *t == token);
                        if mine {
                            *l = None;
                        }
                        mine
                    });
                    board.events.lock().unwrap().push(
                        Event::new(name.clone(), Kind::Leader, acquired, released)
                            .with_token(token),
                    );
                    match end {
                        End::Lost => {
                            losses.fetch_add(1, Ordering::SeqCst);
                        }
                        End::Resign => {
                            match leadership.resign().await {
                                Ok(()) => {}
                                // A fault cut the delete off: the crate retries it in the
                                // background (or the node goes with the session).
                                Err(e) if e.is_outcome_unknown() => {
                                    eprintln!("{name}: resign cut off by a fault: {e}")
                                }
                                Err(e) => board
                                    .errors
                                    .lock()
                                    .unwrap()
                                    .push(format!("{name}: resign failed: {e}")),
                            }
                        }
                        End::Stop => {
                            let _ = leadership.resign().await;
                            return;
                        }
                    }
                }
            })
        };
        Candidate {
            name: name.to_string(),
            session,
            resign,
            terms,
            losses,
            stop,
            task,
        }
    }

    /// Asks the candidate to resign its current term (a no-op if it is not leading).
    fn resign_now(&self) {
        self.resign.send_replace(self.terms.load(Ordering::SeqCst));
    }

    async fn shutdown(self) {
        self.stop.cancel();
        within(
            QUICK,
            &format!("candidate {} to stop", self.name),
            self.task,
        )
        .await
        .unwrap();
        within(
            QUICK,
            &format!("session of {} to close", self.name),
            self.session.close(),
        )
        .await;
    }
}

/// Waits until `n` candidates are queued (every resignation has completed and the resigned
/// candidates have joined again).
async fn wait_queued(observer: &Election, n: usize) {
    within(SLOW, &format!("{n} candidates to be queued"), async {
        while observer.participants().await.map(|p| p.len()).unwrap_or(0) != n {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
}

/// Makes `target` the leader by asking each other in-process leader to resign in turn (each
/// goes to the back of the line). `observer` reads who leads, which also covers a target that
/// runs in another process.
async fn rotate_until_leads(
    target: &str,
    observer: &Election,
    candidates: &[&Candidate],
    board: &Board,
) {
    let deadline = tokio::time::Instant::now() + SLOW;
    loop {
        assert!(
            tokio::time::Instant::now() < deadline,
            "expected {target} to lead within {SLOW:?} of rotating; leader is {:?}",
            observer.leader().await
        );
        if let Some((name, token, _)) = board.current() {
            if name == target {
                return;
            }
            let c = candidates
                .iter()
                .find(|c| c.name == name)
                .expect("leader is a known candidate");
            c.resign_now();
            let mut rx = board.leader.subscribe();
            let _ = timeout(
                QUICK,
                rx.wait_for(|l| l.as_ref().map(|l| l.1) != Some(token)),
            )
            .await;
            continue;
        }
        // No in-process leader: maybe the target (another process) leads, or a hand-off is
        // under way.
        if let Ok(Some(l)) = observer.leader().await {
            if l.id == target {
                return;
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

// ------------------------------------------------------------------------------ child process

/// The candidate program (`tests/bin/elect_child.rs`), built by cargo with this test.
fn elect_child_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_elect_child"))
}

fn spawn_child(label: &str, hosts: &str, path: &str) -> Peer {
    let child = Command::new(elect_child_bin())
        .args([hosts, path, label, &SESSION_TIMEOUT.as_millis().to_string()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn elect_child");
    Peer::new(label, child)
}

/// Waits (blocking the worker thread, which `block_in_place` allows) for a peer line.
fn peer_wait(
    peer: &mut Peer,
    limit: Duration,
    what: &str,
    pred: impl FnMut(&InteropLine) -> bool,
) -> InteropLine {
    tokio::task::block_in_place(|| peer.wait_for(limit, pred)).unwrap_or_else(|| {
        panic!(
            "expected {what} from {} within {limit:?}; its output:\n{}",
            peer.label,
            peer.lines.join("\n")
        )
    })
}

/// The fencing token the child printed after its node name on the last ACQ line.
fn last_child_token(peer: &Peer) -> i64 {
    let line = peer
        .lines
        .iter()
        .rev()
        .find(|l| l.starts_with("ACQ "))
        .expect("an ACQ line");
    line.split_whitespace()
        .nth(5)
        .and_then(|t| t.parse().ok())
        .unwrap_or_else(|| panic!("no token in {line:?}"))
}

fn signal(pid: u32, sig: libc::c_int) {
    // SAFETY: sending a signal to a child process we spawned has no memory-safety conditions.
    let rc = unsafe { libc::kill(pid as libc::pid_t, sig) };
    assert_eq!(
        rc,
        0,
        "kill({pid}, {sig}) failed: {}",
        std::io::Error::last_os_error()
    );
}

/// The state letter of /proc/<pid>/stat (`T` = stopped).
fn proc_state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?.1.trim_start().chars().next()
}

// ------------------------------------------------------------------------------ standalone

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn campaign_leader_participants_and_history() {
    let path = format!("{}/election", unique_root("elect"));
    let hosts = shared_server().connect_string();
    let bystander = connect(&hosts).await;
    let watcher = Election::new(&bystander, &path, "bystander").unwrap();

    // Given no candidate, when a bystander reads, then there is no leader.
    assert_eq!(
        watcher.leader().await.unwrap(),
        None,
        "expected no leader before any candidate"
    );
    assert!(watcher.participants().await.unwrap().is_empty());

    // When three candidates on their own sessions each lead four terms,
    let events = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for i in 0..3 {
        let session = connect(&hosts).await;
        let election = Election::new(&session, &path, format!("cand-{i}")).unwrap();
        let watcher = watcher.clone();
        let events = events.clone();
        tasks.push(tokio::spawn(async move {
            for _ in 0..4 {
                let l = election.campaign().await.unwrap();
                let acquired = monotonic_ns();
                // then, while it leads, every reader names it, with its token and node,
                let seen = watcher
                    .leader()
                    .await
                    .unwrap()
                    .expect("a leader while one leads");
                assert_eq!(
                    (seen.id.as_str(), seen.fencing_token, seen.session_id),
                    (election.id(), l.fencing_token(), l.session_id()),
                    "expected the reader to name the candidate that leads"
                );
                assert!(
                    l.path().ends_with(&seen.node),
                    "expected node {} to be {}",
                    seen.node,
                    l.path()
                );
                let ps = watcher.participants().await.unwrap();
                assert!(
                    ps[0].is_leader && ps[0].id == election.id(),
                    "expected {} first, saw {ps:?}",
                    election.id()
                );
                assert!(ps[1..].iter().all(|p| !p.is_leader));
                assert!(
                    ps.windows(2)
                        .all(|w| node_sequence(&w[0].node) < node_sequence(&w[1].node)),
                    "expected queue order: {ps:?}"
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
                let released = monotonic_ns();
                events.lock().unwrap().push(
                    Event::new(election.id(), Kind::Leader, acquired, released)
                        .with_token(l.fencing_token()),
                );
                l.resign().await.unwrap();
            }
            session.close().await;
        }));
    }
    for t in tasks {
        within(
            Duration::from_secs(60),
            "three candidates to lead four terms each",
            t,
        )
        .await
        .unwrap();
    }
    // then no two terms overlapped, and tokens increased with each term.
    let events = events.lock().unwrap().clone();
    assert_eq!(
        events.len(),
        12,
        "expected 12 terms, recorded {}",
        events.len()
    );
    check(&events).assert_clean("three candidates, four terms each");
    assert_eq!(
        watcher.leader().await.unwrap(),
        None,
        "expected no leader after everyone resigned"
    );

    // A resigned or timed-out candidacy leaves nothing behind.
    let a = Election::new(&bystander, &path, "a").unwrap();
    let b = Election::new(&bystander, &path, "b").unwrap();
    let held = a.campaign().await.unwrap();
    assert_eq!(
        b.campaign_timeout(Duration::from_millis(300))
            .await
            .unwrap_err(),
        Error::Timeout
    );
    let ps = watcher.participants().await.unwrap();
    assert_eq!(
        ps.iter().map(|p| p.id.as_str()).collect::<Vec<_>>(),
        ["a"],
        "expected only a after b timed out"
    );
    drop(held); // resigns in the background
    let l = within(QUICK, "b to lead after a's guard was dropped", b.campaign())
        .await
        .unwrap();
    assert_eq!(
        watcher.leader().await.unwrap().map(|l| l.id),
        Some("b".to_string())
    );
    l.resign().await.unwrap();
    bystander.close().await;
}

/// The next item of an observer stream, which must come within [`QUICK`] and be `Ok`.
/// Given three candidates taking turns (each resigns with the default plain delete and queues
/// again at the back), when a leader resigns, then the next one takes over after exactly one
/// request, as Curator's `getChildren`: its snapshot of the queue still names the candidate
/// that left two turns ago, and walking back through it cost an `exists` more (2 requests per
/// failover before the fix).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_failover_costs_the_next_leader_one_request() {
    let path = format!("{}/election", unique_root("elect-cost"));
    let hosts = shared_server().connect_string();
    let mut sessions = Vec::new();
    for _ in 0..3 {
        sessions.push(connect(&hosts).await);
    }
    let observer_session = connect(&hosts).await;
    let observer = Election::new(&observer_session, &path, "observer").unwrap();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let go: Vec<Arc<tokio::sync::Notify>> = (0..3)
        .map(|_| Arc::new(tokio::sync::Notify::new()))
        .collect();
    let mut tasks = Vec::new();
    for (i, s) in sessions.iter().enumerate() {
        let election = Election::new(s, &path, format!("c{i}")).unwrap();
        let (tx, go, s) = (tx.clone(), go[i].clone(), s.clone());
        tasks.push(tokio::spawn(async move {
            loop {
                let leadership = election.campaign().await.unwrap();
                if tx.send((i, s.request_count(), leadership)).is_err() {
                    return;
                }
                go.notified().await;
            }
        }));
        // Queue in order: c0 leads, c1 and c2 behind it.
        wait_queued(&observer, i + 1).await;
    }
    let (mut cur, _, mut leadership) = within(QUICK, "a first leader", rx.recv()).await.unwrap();
    let mut costs = Vec::new();
    for _ in 0..6 {
        wait_queued(&observer, 3).await;
        let before: Vec<u64> = sessions.iter().map(Session::request_count).collect();
        leadership.resign().await.unwrap();
        go[cur].notify_one();
        let (next, at_grant, l) = within(QUICK, "the next leader", rx.recv()).await.unwrap();
        costs.push(at_grant - before[next]);
        (cur, leadership) = (next, l);
    }
    assert_eq!(
        costs,
        vec![1; 6],
        "requests sent by each next leader between the resignation and its election"
    );
    leadership.resign().await.unwrap();
    for t in tasks {
        t.abort();
    }
    for s in sessions.iter().chain([&observer_session]) {
        s.close().await;
    }
}

async fn next_change(changes: &mut LeaderChanges, what: &str) -> LeaderChange {
    within(QUICK, what, changes.next())
        .await
        .unwrap_or_else(|| panic!("expected {what}, the stream ended"))
        .unwrap_or_else(|e| panic!("expected {what}, got error {e}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn observe_reports_each_leader_in_order() {
    let path = format!("{}/election", unique_root("observe"));
    let hosts = shared_server().connect_string();
    let bystander = connect(&hosts).await;
    let mut changes = Election::new(&bystander, &path, "bystander")
        .unwrap()
        .observe();
    // Given no candidate, the first item says so.
    assert_eq!(
        next_change(&mut changes, "the first observation").await,
        LeaderChange::Vacant
    );

    // When a leads and b, c join behind it,
    let sessions = [
        connect(&hosts).await,
        connect(&hosts).await,
        connect(&hosts).await,
    ];
    let names = ["a", "b", "c"];
    let elections: Vec<Election> = sessions
        .iter()
        .zip(names)
        .map(|(s, n)| Election::new(s, &path, n).unwrap())
        .collect();
    let la = elections[0].campaign().await.unwrap();
    let first = next_change(&mut changes, "a to be reported").await;
    assert_eq!(
        (first.id(), first.fencing_token()),
        (Some("a"), Some(la.fencing_token())),
        "expected a, saw {first:?}"
    );
    // (b joins before c, so that b is next in line.)
    let mut pending = Vec::new();
    for (i, e) in elections.iter().enumerate().skip(1) {
        let e = e.clone();
        pending.push(tokio::spawn(async move { e.campaign().await }));
        within(QUICK, "the candidate to join", async {
            while elections[0].participants().await.unwrap().len() < i + 1 {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await;
    }
    let pending_c = pending.pop().unwrap();
    let pending_b = pending.pop().unwrap();
    // then joining candidates behind the leader are not reported (only the leader is watched),
    assert!(
        timeout(Duration::from_millis(300), changes.next())
            .await
            .is_err(),
        "expected no item while a still leads; b and c only joined"
    );
    // and each resignation reports the next leader, in order, with a larger token.
    la.resign().await.unwrap();
    let lb = within(QUICK, "b to lead", pending_b)
        .await
        .unwrap()
        .unwrap();
    let second = next_change(&mut changes, "b to be reported").await;
    assert_eq!(
        (second.id(), second.fencing_token()),
        (Some("b"), Some(lb.fencing_token())),
        "expected b, saw {second:?}"
    );
    lb.resign().await.unwrap();
    let lc = within(QUICK, "c to lead", pending_c)
        .await
        .unwrap()
        .unwrap();
    let third = next_change(&mut changes, "c to be reported").await;
    assert_eq!(
        (third.id(), third.fencing_token()),
        (Some("c"), Some(lc.fencing_token())),
        "expected c, saw {third:?}"
    );
    assert!(
        first.fencing_token() < second.fencing_token()
            && second.fencing_token() < third.fencing_token()
    );
    // When the last leader's session closes, the stream reports the vacancy.
    for s in &sessions {
        s.close().await;
    }
    drop(lc);
    let last = next_change(&mut changes, "the vacancy to be reported").await;
    assert_eq!(
        last,
        LeaderChange::Vacant,
        "expected Vacant after every candidate left"
    );
    // When the observing session closes, the stream ends.
    bystander.close().await;
    assert!(
        within(QUICK, "the stream to end", changes.next())
            .await
            .is_none(),
        "expected the stream to end with its session"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_campaigns_again_after_loss_and_after_each_term() {
    let path = format!("{}/election", unique_root("run"));
    let server = shared_server();
    // A private proxy, so that expiring this session does not disturb the other tests.
    let proxy = FaultProxy::start(server.addr()).unwrap();
    let session = connect(&proxy.addr().to_string()).await;
    let other = connect(&server.connect_string()).await;
    let election = Election::new(&session, &path, "runner").unwrap();

    // Given a runner whose closure leads until it loses leadership, or until told to return,
    let (terms_tx, mut terms_rx) = tokio::sync::mpsc::unbounded_channel();
    let finish_term = Arc::new(tokio::sync::Notify::new());
    let runner = election.run({
        let finish_term = finish_term.clone();
        move |leadership| {
            let terms_tx = terms_tx.clone();
            let finish_term = finish_term.clone();
            async move {
                let _ = terms_tx.send((leadership.session_id(), leadership.fencing_token()));
                tokio::select! {
                    _ = leadership.lost() => {}
                    _ = finish_term.notified() => {}
                }
            }
        }
    });
    let (session1, token1) = within(QUICK, "the first term", terms_rx.recv())
        .await
        .unwrap();
    assert!(runner.is_leading());

    // when its session expires, then the term ends and it leads again in a new session.
    expire_session(
        &[&proxy],
        &server.connect_string(),
        session.zk_session_info().unwrap(),
    )
    .await
    .unwrap();
    let (session2, token2) = within(SLOW, "a second term in a new session", terms_rx.recv())
        .await
        .unwrap();
    assert_ne!(
        session2, session1,
        "expected the second term in a new session"
    );
    assert!(token2 > token1, "expected token {token2} > {token1}");
    assert_eq!(runner.terms(), 2);

    // Given another candidate waiting, when the closure returns, then the other leads and
    // the runner joins again behind it.
    let rival = Election::new(&other, &path, "rival").unwrap();
    let pending = tokio::spawn(async move { rival.campaign().await });
    within(QUICK, "the rival to queue", async {
        while election.participants().await.unwrap().len() < 2 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    finish_term.notify_one();
    let rival_term = within(QUICK, "the rival to lead", pending)
        .await
        .unwrap()
        .unwrap();
    let ps = within(QUICK, "the runner to queue again", async {
        loop {
            let ps = election.participants().await.unwrap();
            if ps.len() == 2 {
                return ps;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert_eq!(
        ps.iter().map(|p| p.id.as_str()).collect::<Vec<_>>(),
        ["rival", "runner"]
    );
    assert!(!runner.is_leading());
    rival_term.resign().await.unwrap();
    let (_, token3) = within(QUICK, "a third term", terms_rx.recv())
        .await
        .unwrap();
    assert!(token3 > token2);

    // When stopped while leading, the runner resigns.
    within(QUICK, "the runner to stop", runner.stop())
        .await
        .unwrap();
    within(QUICK, "the runner's node to go", async {
        while !election.participants().await.unwrap().is_empty() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    session.close().await;
    other.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expiry_requeues_waiters_tells_leaders_and_observers_carry_on() {
    let path = format!("{}/election", unique_root("loss"));
    let server = shared_server();
    // A private proxy, so that expiring this session does not disturb the other tests.
    let proxy = FaultProxy::start(server.addr()).unwrap();
    let session = connect(&proxy.addr().to_string()).await;
    let admin = connect(&server.connect_string()).await;
    let expire = || async {
        let info = session.zk_session_info().expect("a live session to expire");
        expire_session(&[&proxy], &server.connect_string(), info)
            .await
            .unwrap();
    };
    let mut changes = Election::new(&session, &path, "observer")
        .unwrap()
        .observe();
    assert_eq!(
        next_change(&mut changes, "the first observation").await,
        LeaderChange::Vacant
    );

    // Given a leader on another session and our candidate waiting behind it,
    let leader = Election::new(&admin, &path, "other")
        .unwrap()
        .campaign()
        .await
        .unwrap();
    let seen = next_change(&mut changes, "the leader to be reported").await;
    assert_eq!(seen.id(), Some("other"));
    let waiter = Election::new(&session, &path, "waiter").unwrap();
    let first_session = session.session_id().unwrap();
    let pending = tokio::spawn({
        let waiter = waiter.clone();
        async move { waiter.campaign().await }
    });
    within(QUICK, "the waiter to queue", async {
        while waiter.participants().await.map(|p| p.len()).unwrap_or(0) < 2 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    // when the waiter's session expires, then its campaign carries on in the new session,
    expire().await;
    within(SLOW, "the waiter to queue again in a new session", async {
        loop {
            let requeued = session.session_id().is_some_and(|id| id != first_session)
                && waiter
                    .participants()
                    .await
                    .is_ok_and(|ps| ps.iter().any(|p| p.id == "waiter"));
            if requeued {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert!(
        !pending.is_finished(),
        "expected the campaign to wait, not to fail or win"
    );
    leader.resign().await.unwrap();
    let l = within(QUICK, "the waiter to lead", pending)
        .await
        .unwrap()
        .unwrap();
    assert_ne!(
        l.session_id(),
        first_session,
        "expected leadership in the new session"
    );
    // and the observer, whose session expired too, reports the change.
    let seen = next_change(&mut changes, "the waiter to be reported after the expiry").await;
    assert_eq!(
        (seen.id(), seen.fencing_token()),
        (Some("waiter"), Some(l.fencing_token()))
    );

    // When the leader's session expires, lost() fires and resigning reports the loss; the
    // observer reports the vacancy.
    expire().await;
    within(QUICK, "lost() after expiry", l.lost()).await;
    assert_eq!(l.loss_reason(), Some(LossReason::SessionExpired));
    assert!(
        matches!(l.resign().await, Err(Error::LockLost(_))),
        "expected resigning a lost leadership to fail"
    );
    assert_eq!(
        next_change(&mut changes, "the vacancy").await,
        LeaderChange::Vacant
    );

    // When someone else deletes the leader's node, lost() fires.
    let l = within(SLOW, "leading again in the new session", waiter.campaign())
        .await
        .unwrap();
    let zk = zk_recipes::zk::Client::connect(&server.connect_string())
        .await
        .unwrap();
    zk.delete(l.path(), None).await.unwrap();
    within(QUICK, "lost() after the node was deleted", l.lost()).await;
    assert_eq!(l.loss_reason(), Some(LossReason::NodeDeleted));
    let observer = Election::new(&admin, &path, "admin").unwrap();
    assert_eq!(observer.leader().await.unwrap(), None);
    session.close().await;
    admin.close().await;
}

// ------------------------------------------------------------------------------ Curator

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn curator_leader_latch_and_ours_elect_one_leader() {
    build_java();
    let hosts = shared_server().connect_string();
    let path = format!("{}/election", unique_root("curator"));
    let session = connect(&hosts).await;
    let ours = Election::new(&session, &path, "rust-1").unwrap();

    // Given a Curator LeaderLatch leading, our reader names it and our candidate waits.
    let mut java = Peer::curator(
        "curator-a",
        &["latch", &hosts, &path, "java-a", "1500", "1"],
    );
    let node = match peer_wait(&mut java, SLOW, "Curator to lead", |l| {
        matches!(l, InteropLine::Acq { .. } | InteropLine::Err(_))
    }) {
        InteropLine::Acq { node, .. } => node.expect("Curator reports its node"),
        other => panic!("expected ACQ from Curator, got {other:?}"),
    };
    assert!(
        node.starts_with("_c_") && node.contains("-latch-"),
        "expected a LeaderLatch node, got {node}"
    );
    let seen = ours.leader().await.unwrap().expect("a leader");
    assert_eq!(
        (seen.id.as_str(), seen.node.as_str()),
        ("java-a", node.as_str())
    );
    let l = within(
        SLOW,
        "our candidate to lead after Curator closes its latch",
        ours.campaign(),
    )
    .await
    .unwrap();
    let acquired = monotonic_ns();
    let hist = tokio::task::block_in_place(|| java.finish(SLOW));
    hist.assert_ok();
    let java_rel = hist.events()[0].released_ns;
    assert!(
        java_rel < acquired,
        "expected Curator's REL ({java_rel}) before our term began ({acquired})"
    );

    // Given ours leading and a Curator candidate waiting, when ours resigns (default: no
    // mark), then Curator leads.
    let mut java = Peer::curator("curator-b", &["latch", &hosts, &path, "java-b", "0", "1"]);
    peer_wait(&mut java, SLOW, "Curator to queue", |l| {
        matches!(l, InteropLine::Req { .. })
    });
    within(SLOW, "Curator's node to appear", async {
        while ours.participants().await.unwrap().len() < 2 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    let resigned = monotonic_ns();
    l.resign().await.unwrap();
    peer_wait(
        &mut java,
        SLOW,
        "Curator to lead after our resignation",
        |l| matches!(l, InteropLine::Acq { .. }),
    );
    let hist = tokio::task::block_in_place(|| java.finish(SLOW));
    hist.assert_ok();
    assert!(hist.events()[0].acquired_ns > resigned);

    // When Rust and Java candidates contend for many terms, then one leads at a time and
    // grants follow node order.
    let mut peers = vec![
        Peer::curator("curator-1", &["latch", &hosts, &path, "java-1", "30", "5"]),
        Peer::curator("curator-2", &["latch", &hosts, &path, "java-2", "30", "5"]),
    ];
    for p in &mut peers {
        peer_wait(p, SLOW, "Curator READY", |l| {
            matches!(l, InteropLine::Ready)
        });
    }
    let mut tasks = Vec::new();
    for i in 0..2 {
        let s = connect(&hosts).await;
        let e = Election::new(&s, &path, format!("rust-{i}")).unwrap();
        tasks.push(tokio::spawn(async move {
            let mut events = Vec::new();
            for _ in 0..5 {
                let l = e.campaign().await.unwrap();
                let a = monotonic_ns();
                tokio::time::sleep(Duration::from_millis(30)).await;
                let seq = node_sequence(l.path()).unwrap();
                events.push(Event::new(e.id(), Kind::Leader, a, monotonic_ns()).with_token(seq));
                l.resign().await.unwrap();
            }
            s.close().await;
            events
        }));
    }
    let mut events = Vec::new();
    for t in tasks {
        events.extend(
            within(
                Duration::from_secs(120),
                "our candidates to lead five terms each",
                t,
            )
            .await
            .unwrap(),
        );
    }
    let hists = tokio::task::block_in_place(|| finish_all(peers, Duration::from_secs(120)));
    for h in &hists {
        h.assert_ok();
        assert_eq!(
            h.events().len(),
            5,
            "{}: expected 5 terms:\n{}",
            h.label,
            h.lines.join("\n")
        );
        for (e, n) in h.events().iter().zip(h.nodes()) {
            let seq = n
                .as_deref()
                .and_then(node_sequence)
                .expect("Curator reports its node");
            events.push(e.clone().with_token(seq));
        }
    }
    check(&events).assert_clean("Curator LeaderLatch + zk-recipes Election");
    session.close().await;
}

/// Sessions other than `except` that watch `path` on the shared server (its `wchc` report).
fn other_watchers(path: &str, except: i64) -> Vec<String> {
    let report =
        tokio::task::block_in_place(|| shared_server().four_letter("wchc")).unwrap_or_default();
    let except = format!("{except:#x}");
    let mut session = String::new();
    let mut found = Vec::new();
    for line in report.lines() {
        if line.starts_with("0x") {
            session = line.trim().to_string();
        } else if line.trim() == path && session != except {
            found.push(session.clone());
        }
    }
    found
}

/// Pins why resignation does not write the release mark by default: Curator's LeaderLatch
/// only re-checks on `NodeDeleted`, so a marked resignation strands a Curator follower.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn marked_resignation_strands_a_curator_follower() {
    build_java();
    let hosts = shared_server().connect_string();
    let path = format!("{}/election", unique_root("mark"));
    let session = connect(&hosts).await;
    let ours = Election::new(&session, &path, "rust")
        .unwrap()
        .with_release_mark(true);
    let l = ours.campaign().await.unwrap();
    let mut java = Peer::curator("curator", &["latch", &hosts, &path, "java", "0", "1"]);
    peer_wait(&mut java, SLOW, "Curator to queue", |l| {
        matches!(l, InteropLine::Req { .. })
    });
    // Curator watches our node (getData) once its node is in and it has read the children.
    let mine = l.path().to_string();
    within(SLOW, "Curator to watch our node", async {
        while other_watchers(&mine, l.session_id()).is_empty() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    l.resign().await.unwrap();
    // Our reader sees Curator's node first in line, yet Curator does not know it leads.
    let leader = ours
        .leader()
        .await
        .unwrap()
        .expect("Curator's node remains");
    assert_eq!(leader.id, "java");
    let acq = tokio::task::block_in_place(|| {
        java.wait_for(Duration::from_secs(3), |l| {
            matches!(l, InteropLine::Acq { .. })
        })
    });
    assert!(acq.is_none(), "expected Curator 5.4 to miss a marked resignation (if it now leads, the default could change): {acq:?}");
    drop(java);
    session.close().await;
}

// ------------------------------------------------------------------------------ faults

/// All faults on one private three-member ensemble, one after another.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failover_under_faults_on_an_ensemble() {
    // The session manager's log (RUST_LOG, default zk_recipes=info) explains a failure here.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("zk_recipes=info")),
        )
        .with_test_writer()
        .try_init();
    let mut cluster = tokio::task::spawn_blocking(|| ZooKeeperCluster::start(3))
        .await
        .unwrap()
        .expect("a three-member ensemble");
    let path = format!("{}/election", unique_root("faults"));
    let via_proxies = cluster.connect_string_via_proxy();
    let board = Board::new();
    let a = Candidate::start("a", &via_proxies, &path, &board).await;
    let b = Candidate::start("b", &via_proxies, &path, &board).await;
    let c = Candidate::start("c", &via_proxies, &path, &board).await;
    let observer_session = connect(&cluster.connect_string()).await;
    let observer = Election::new(&observer_session, &path, "observer").unwrap();
    let mut child_events: Vec<Event> = Vec::new();

    // 1. The leader resigns: the next candidate leads.
    let (first, _) = board.wait_any_leader(QUICK).await;
    eprintln!("[resign] {first} leads and resigns");
    [&a, &b, &c]
        .iter()
        .find(|x| x.name == first)
        .unwrap()
        .resign_now();
    let (next, next_token) = board.wait_leader_other_than(&first, QUICK).await;
    eprintln!("[resign] {next} took over");
    // Each fault starts once every candidate is queued again, so that no resignation is still
    // in flight when the fault cuts connections.
    wait_queued(&observer, 3).await;

    // 2. The leader's session is ended on the server (`cluster.expire`: its connection is cut
    //    and the session closed by a second client within milliseconds). It is told through
    //    lost(), another leads, and it campaigns again in its new session.
    //
    //    Unlike a real expiry, which the server declares only after a session timeout of
    //    silence (and which the Grace policy anticipates: scenarios 3 and 5), a session killed
    //    by a third party gives its owner no warning: it learns of it only when it reaches the
    //    server again, possibly after the next leader has started. Nothing can prevent that
    //    overlap but fencing, so the recorded term is clipped at the kill and the test checks
    //    what matters instead: the next leader's token is larger, and the old leader is told.
    let leader = [&a, &b, &c].into_iter().find(|x| x.name == next).unwrap();
    let (losses, epoch) = (
        leader.losses.load(Ordering::SeqCst),
        leader.session.epoch_number().unwrap(),
    );
    let killed_ns = monotonic_ns();
    cluster.expire(&leader.session).await.unwrap();
    within(QUICK, "the expired leader's lost()", async {
        while leader.losses.load(Ordering::SeqCst) == losses {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    let (after, after_token) = board.wait_leader_other_than(&leader.name, SLOW).await;
    assert!(
        after_token > next_token,
        "expected the next leader's token {after_token} > the expired one's {next_token}"
    );
    {
        let mut events = board.events.lock().unwrap();
        let term = events
            .iter_mut()
            .find(|e| e.who == leader.name && e.token == Some(next_token))
            .expect("the expired leader's term is recorded");
        let told_ns = term.released_ns;
        term.released_ns = term.released_ns.min(killed_ns);
        eprintln!(
            "[expire] {} lost its session; {after} took over; the old leader was told {:.1} ms after the kill",
            leader.name,
            (told_ns - killed_ns) as f64 / 1e6,
        );
    }
    within(
        SLOW,
        "the expired candidate to campaign again in a new session",
        async {
            loop {
                let again = leader.session.epoch_number().is_some_and(|e| e > epoch)
                    && observer
                        .participants()
                        .await
                        .is_ok_and(|ps| ps.iter().any(|p| p.id == leader.name));
                if again {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        },
    )
    .await;

    // 3. The server the leader is connected to is killed. The leader (on that one member
    //    only) reports loss under the Grace policy; the others lead once the session expires.
    let ensemble_leader =
        tokio::task::block_in_place(|| cluster.leader()).expect("an ensemble leader");
    let member = (0..3).find(|&i| i != ensemble_leader).unwrap();
    let d = Candidate::start(
        "d",
        &cluster.members()[member].connect_string_via_proxy(),
        &path,
        &board,
    )
    .await;
    rotate_until_leads("d", &observer, &[&a, &b, &c, &d], &board).await;
    wait_queued(&observer, 4).await;
    // The observer may name d as soon as d's node is the lowest, before d's campaign has
    // returned (CI once killed the server in that gap, and d, still campaigning, had no
    // leadership to lose): wait until d itself reports that it leads.
    within(SLOW, "d to report that it leads", async {
        while board.current().is_none_or(|(name, _, _)| name != "d") {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    let losses = d.losses.load(Ordering::SeqCst);
    eprintln!("[server killed] d leads through member {member} only; killing it");
    tokio::task::block_in_place(|| cluster.member_mut(member).kill()).unwrap();
    within(SLOW, "d's lost() after its server died", async {
        while d.losses.load(Ordering::SeqCst) == losses {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    let (after, _) = board.wait_leader_other_than("d", SLOW).await;
    eprintln!("[server killed] d lost; {after} took over after d's session expired");
    tokio::task::block_in_place(|| {
        cluster.member_mut(member).restart().unwrap();
        cluster.wait_for_quorum(Duration::from_secs(60)).unwrap();
    });
    within(SLOW, "d to campaign again once its server is back", async {
        while !observer
            .participants()
            .await
            .is_ok_and(|ps| ps.iter().any(|p| p.id == "d"))
        {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;

    // 4. The ensemble's leader is killed: a quorum re-forms; whoever led either kept its
    //    session or reported loss first; in the end someone leads and every candidate is
    //    queued again.
    let ensemble_leader =
        tokio::task::block_in_place(|| cluster.leader()).expect("an ensemble leader");
    eprintln!(
        "[ensemble leader killed] killing member {ensemble_leader}; election leader is {:?}",
        board.current()
    );
    tokio::task::block_in_place(|| cluster.member_mut(ensemble_leader).kill()).unwrap();
    tokio::task::block_in_place(|| cluster.wait_for_quorum(Duration::from_secs(60))).unwrap();
    let (now, _) = board.wait_any_leader(SLOW).await;
    eprintln!("[ensemble leader killed] quorum re-formed; {now} leads");
    tokio::task::block_in_place(|| {
        cluster.member_mut(ensemble_leader).restart().unwrap();
        cluster.wait_for_quorum(Duration::from_secs(60)).unwrap();
    });
    within(SLOW, "all four candidates to be queued again", async {
        while observer
            .participants()
            .await
            .map(|ps| ps.len())
            .unwrap_or(0)
            < 4
        {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;

    // 5. The leading process is paused (SIGSTOP) past the session timeout. Another leads once
    //    the session expires; on SIGCONT the paused process reports the loss from its own
    //    monotonic clock. A stopped process cannot act, so its term is recorded as ending when
    //    it was stopped; the window between SIGCONT and its `REL lost` line is covered by the
    //    fencing token (checked below: the new leader's token is larger).
    let all = [&a, &b, &c, &d];
    let mut paused = spawn_child("paused", &cluster.connect_string(), &path);
    peer_wait(&mut paused, SLOW, "the child to connect", |l| {
        matches!(l, InteropLine::Ready)
    });
    rotate_until_leads("paused", &observer, &all, &board).await;
    wait_queued(&observer, 5).await;
    peer_wait(&mut paused, QUICK, "the child's ACQ", |l| {
        matches!(l, InteropLine::Acq { .. })
    });
    let paused_token = last_child_token(&paused);
    let pid = paused.pid().unwrap();
    signal(pid, libc::SIGSTOP);
    within(QUICK, "the child to be stopped", async {
        while proc_state(pid) != Some('T') {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    let stopped_ns = monotonic_ns();
    eprintln!("[paused] child stopped while leading (token {paused_token})");
    let (after, after_token) = board.wait_leader_other_than("paused", SLOW).await;
    assert!(
        after_token > paused_token,
        "expected the new leader's token {after_token} > the paused one's {paused_token}"
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    let resumed_ns = monotonic_ns();
    signal(pid, libc::SIGCONT);
    let rel = peer_wait(
        &mut paused,
        SLOW,
        "the resumed child to report the loss",
        |l| matches!(l, InteropLine::Rel { .. }),
    );
    match rel {
        InteropLine::Rel { ns, lost, .. } => {
            assert!(lost, "expected REL ... lost from the resumed child");
            assert!(ns >= resumed_ns, "expected the loss reported after SIGCONT");
            eprintln!(
                "[paused] {after} took over; the child reported the loss {:.1} ms after SIGCONT",
                (ns - resumed_ns) as f64 / 1e6
            );
        }
        other => panic!("expected REL, got {other:?}"),
    }
    let paused_acq = paused
        .collector
        .events
        .last()
        .map(|e| e.acquired_ns)
        .expect("the child's recorded term");
    child_events
        .push(Event::new("paused", Kind::Leader, paused_acq, stopped_ns).with_token(paused_token));
    let hist = tokio::task::block_in_place(|| paused.finish(SLOW));
    hist.assert_ok();

    // 6. The leading process is killed (SIGKILL): another leads after its session times out.
    let mut doomed = spawn_child("doomed", &cluster.connect_string(), &path);
    peer_wait(&mut doomed, SLOW, "the child to connect", |l| {
        matches!(l, InteropLine::Ready)
    });
    rotate_until_leads("doomed", &observer, &all, &board).await;
    wait_queued(&observer, 5).await;
    let acq = match peer_wait(&mut doomed, QUICK, "the child's ACQ", |l| {
        matches!(l, InteropLine::Acq { .. })
    }) {
        InteropLine::Acq { ns, .. } => ns,
        _ => unreachable!(),
    };
    let doomed_token = last_child_token(&doomed);
    tokio::task::block_in_place(|| doomed.kill());
    let killed_ns = monotonic_ns();
    child_events.push(Event::new("doomed", Kind::Leader, acq, killed_ns).with_token(doomed_token));
    let (after, after_token) = board.wait_leader_other_than("doomed", SLOW).await;
    assert!(after_token > doomed_token);
    eprintln!(
        "[killed] {after} took over {:.0} ms after the leading process died (session timeout {SESSION_TIMEOUT:?})",
        (monotonic_ns() - killed_ns) as f64 / 1e6
    );

    // Finally: no two terms overlapped and tokens increased, across all faults.
    for x in [a, b, c, d] {
        x.shutdown().await;
    }
    observer_session.close().await;
    let errors = board.errors.lock().unwrap().clone();
    assert!(
        errors.is_empty(),
        "expected no candidate errors, saw {errors:?}"
    );
    let mut events = board.events.lock().unwrap().clone();
    events.extend(child_events);
    events.sort_by_key(|e| e.acquired_ns);
    for e in &events {
        eprintln!("  {e}");
    }
    check(&events).assert_clean("election under faults");
}

/// `ElectionRunner::is_leading()` is "whether the closure is running". Given a runner whose
/// closure panics during its term, when the runner has ended (its node gone, another
/// candidate leading), then it says it is not leading. It said `true` for good: the flag was
/// lowered by a store after the term, which the panic's unwinding skipped (found by a review,
/// 2026-11-27).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runner_whose_closure_panicked_is_not_leading() {
    use std::time::Instant;
    let root = zk_recipes::testing::unique_root("runner-panic");
    let session = support::zk::session().await;
    let election = zk_recipes::Election::new(&session, &root, "a").unwrap();
    let runner = election.run(|_l| async move {
        tokio::time::sleep(Duration::from_millis(50)).await;
        panic!("the leader's work panicked (expected by this test)");
    });
    let by = Instant::now() + Duration::from_secs(10);
    while !runner.is_finished() {
        assert!(Instant::now() < by, "the runner did not end");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let by = Instant::now() + Duration::from_secs(5);
    while !support::zk::children(&root).await.is_empty() {
        assert!(Instant::now() < by, "the panicked leader's node stayed");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let other = zk_recipes::Election::new(&session, &root, "b").unwrap();
    let l = tokio::time::timeout(Duration::from_secs(5), other.campaign())
        .await
        .expect("b leads")
        .unwrap();
    assert!(
        !runner.is_leading(),
        "the runner ended (its closure panicked) and b leads, but is_leading() says true"
    );
    assert_eq!(runner.terms(), 1);
    drop(l);
    session.close().await;
}

// ------------------------------------------------------------------ found by a review
// (2026-11-27): an idle observer kept an ended epoch's session alive; a connection blip at
// entry was reported as an expiry, and sent a candidate to the back of the queue.

async fn raw_children(raw: &zk_recipes::zk::Client, dir: &str) -> Vec<String> {
    match raw.list_children(dir).await {
        Ok(c) => c,
        Err(zk_recipes::zk::Error::NoNode) => Vec::new(),
        Err(e) => panic!("list {dir}: {e}"),
    }
}

/// How the leader's epoch ends in [`idle_observer_then_the_epoch_ends`].
#[derive(Debug, Clone, Copy)]
enum EpochEnds {
    /// As the loss policy ends it (`force_epoch_end`), the connection still up.
    Forced,
    /// Through `Grace` itself: both directions of the connection stall for 9 s (not dropped),
    /// so the manager gives up on the epoch at 8.5 s while the server, which hears from the
    /// client again at 9 s, keeps the 10 s session.
    ByGrace,
}

/// An ended epoch must close its ZooKeeper client so that its ephemeral nodes go (the session
/// manager "closes that client so its ephemeral nodes are not left behind"). A leader keeps a
/// `LeaderChanges` stream of its own session, read once and then not polled; its epoch ends;
/// another candidate must then lead. Before the fix the idle stream kept the ended epoch (and
/// so its client), which carried on (`Forced`) or reconnected into the old session (`ByGrace`):
/// the leader's node stayed first in line after `lost()` and nobody else could ever lead.
async fn idle_observer_then_the_epoch_ends(ends: EpochEnds) {
    use zk_recipes::testing::{Fault, FaultAction, FaultPoint};
    let dir = format!("{}/election", unique_root("idle-observer"));
    // 10 s (the harness's largest): under `Grace`, the window between the manager's deadline
    // (8.5 s) and the server's expiry (10 s) leaves the client time to reconnect.
    let (a, proxy) =
        support::zk::session_via_proxy(Duration::from_secs(10), zk_recipes::LossPolicy::Grace)
            .await;
    let b = connect(&shared_server().connect_string()).await;
    let raw = support::zk::raw().await;
    let ea = Election::new(&a, &dir, "a").unwrap();
    let leadership = ea.campaign().await.unwrap();
    let old_node = leadership.path().to_string();
    let old_session = leadership.session_id();
    let mut changes = ea.observe();
    let first = timeout(Duration::from_secs(5), changes.next())
        .await
        .expect("first observation")
        .expect("an item")
        .expect("no error");
    assert!(matches!(first, LeaderChange::Elected(_)), "{first:?}");
    match ends {
        EpochEnds::Forced => a.force_epoch_end(),
        EpochEnds::ByGrace => {
            proxy.arm(Fault::new(
                FaultPoint::AfterReply(1),
                FaultAction::Stall(Duration::from_secs(9)),
            ));
            let _ = a.read("/zookeeper").await;
            let mut events = a.latest_state();
            timeout(
                Duration::from_secs(20),
                events.wait_for(|e| {
                    !matches!(e, zk_recipes::SessionEvent::Connected { epoch: 1, .. })
                }),
            )
            .await
            .expect("the Grace policy to end epoch 1")
            .unwrap();
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
    }
    timeout(Duration::from_secs(5), leadership.lost())
        .await
        .expect("lost() after the epoch ended");
    drop(leadership);
    let led = Election::new(&b, &dir, "b")
        .unwrap()
        .campaign_timeout(Duration::from_secs(15))
        .await;
    let owner_alive = raw
        .check_stat(&old_node)
        .await
        .unwrap()
        .map(|s| s.ephemeral_owner == old_session);
    assert!(
        led.is_ok(),
        "{ends:?}: expected b to lead within 15 s after a's epoch 1 ended; got {led:?}; a's \
         epoch-1 leader node still there owned by the old session: {owner_alive:?}; children: {:?}",
        raw_children(&raw, &dir).await
    );
    // The idle stream lived until here.
    drop(changes);
    drop(led);
    a.close().await;
    b.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_observer_never_keeps_an_ended_epochs_leader_node() {
    idle_observer_then_the_epoch_ends(EpochEnds::Forced).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_observer_never_revives_a_session_grace_gave_up() {
    idle_observer_then_the_epoch_ends(EpochEnds::ByGrace).await;
}

/// `with_requeue_on_expiry(false)`: "a waiting candidate whose session expires ... campaign
/// fails with Error::SessionExpired". A mere connection blip (the same session carries on)
/// must not be reported as an expiry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_blip_is_not_reported_as_session_expired_without_requeue() {
    use zk_recipes::testing::{Fault, FaultAction, FaultPoint};
    let dir = format!("{}/election", unique_root("blip-noreq"));
    let (s, proxy) =
        support::zk::session_via_proxy(SESSION_TIMEOUT, zk_recipes::LossPolicy::Grace).await;
    let e = Election::new(&s, &dir, "a")
        .unwrap()
        .with_requeue_on_expiry(false);
    // Make the directory first, so that the campaign's requests are its create and listing.
    let raw = support::zk::raw().await;
    let _ = raw
        .create(
            dir.rsplit_once('/').unwrap().0,
            b"",
            &zk_recipes::zk::CreateMode::Persistent.with_acls(zk_recipes::zk::Acls::anyone_all()),
        )
        .await;
    let _ = raw
        .create(
            &dir,
            b"",
            &zk_recipes::zk::CreateMode::Persistent.with_acls(zk_recipes::zk::Acls::anyone_all()),
        )
        .await;
    let session_before = s.session_id();
    // The create is answered; the listing's reply is lost with the connection, which comes
    // back at once (same session).
    proxy.arm(Fault::new(
        FaultPoint::BeforeReply(2),
        FaultAction::Cut {
            refuse_for: Duration::from_millis(0),
        },
    ));
    let r = timeout(Duration::from_secs(10), e.campaign())
        .await
        .expect("campaign answered");
    let status = proxy.fault_status();
    let session_after = s.session_id();
    let events = vec![format!("{:?}", s.state())];
    assert!(
        r.is_ok(),
        "expected to lead (the session never expired: id before {session_before:?}, after \
         {session_after:?}, epoch {:?}, state {events:?}, fault {status:?}); got {:?}",
        s.epoch_number(),
        r.as_ref().err()
    );
    drop(r);
    s.close().await;
}

/// "Candidates lead in the order they joined. A candidate whose session expires while waiting
/// joins again at the back." A connection blip (the session lives on) on the listing that
/// follows a's create sends a to the back too: b, who joined after a's node was made, leads
/// first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_blip_at_entry_sends_a_waiting_candidate_to_the_back() {
    use zk_recipes::testing::{Fault, FaultAction, FaultPoint};
    let dir = format!("{}/election", unique_root("blip-order"));
    let l_session = connect(&shared_server().connect_string()).await;
    let b_session = connect(&shared_server().connect_string()).await;
    let (a_session, proxy) =
        support::zk::session_via_proxy(SESSION_TIMEOUT, zk_recipes::LossPolicy::Grace).await;
    let raw = support::zk::raw().await;
    let leader = Election::new(&l_session, &dir, "l")
        .unwrap()
        .campaign()
        .await
        .unwrap();
    let a_id = a_session.session_id();
    // a's create is applied; the listing's reply is lost and a cannot reconnect for 1 s.
    proxy.arm(Fault::new(
        FaultPoint::BeforeReply(2),
        FaultAction::Cut {
            refuse_for: Duration::from_secs(1),
        },
    ));
    let ea = Election::new(&a_session, &dir, "a").unwrap();
    let a = tokio::spawn(async move { ea.campaign().await });
    support::zk::wait_for_children(&dir, 2, "a's node to be created").await;
    // b joins after a's node exists.
    let eb = Election::new(&b_session, &dir, "b").unwrap();
    let b = tokio::spawn(async move { eb.campaign().await });
    support::zk::wait_for_children(&dir, 3, "b's node to be created").await;
    let order_when_b_joined = raw_children(&raw, &dir).await;
    // Let a reconnect (same session) and settle.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        a_session.session_id(),
        a_id,
        "a's session must not have changed"
    );
    let order_after = Election::new(&b_session, &dir, "x")
        .unwrap()
        .participants()
        .await
        .unwrap()
        .into_iter()
        .map(|p| p.id)
        .collect::<Vec<_>>();
    leader.resign().await.unwrap();
    let first = tokio::select! {
        r = a => { let _keep = r; "a" }
        r = b => { let _keep = r; "b" }
    };
    assert_eq!(
        first, "a",
        "expected a (joined first, session never expired) to lead next; children when b \
         joined: {order_when_b_joined:?}; queue after a's blip: {order_after:?}"
    );
}
