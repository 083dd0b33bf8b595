//! Our fair lock sharing one path with Apache Curator's `InterProcessMutex` (Curator 5.4) and
//! kazoo's `Lock` (Debian python3-kazoo 2.8), all histories merged on CLOCK_MONOTONIC and
//! checked together: never two holders at once, and grants in znode sequence order across
//! implementations (every exclusive event carries its node's sequence number as token).
//!
//! Each mixed run starts behind a *gate*: one of our contenders takes the lock first and keeps
//! it until every peer and every contender of ours has queued, so the run is a real contest
//! whatever the JVM start-up time (and the gate itself must block Curator and kazoo).
//!
//! Needs a JDK, Debian's zookeeper and libcurator-recipes-java, and python3-kazoo. Missing
//! tools FAIL the tests.

mod support;

use std::future::Future;
use std::time::{Duration, Instant};

use support::history::{check, node_sequence, Event, InteropLine, Kind};
use support::interop::{build_java, finish_all, Peer, PeerHistory};
use zk_recipes::testing::{monotonic_nanos, shared_server, unique_root};
use zk_recipes::{Error, FairLock, Layout, NodeKind, NodeName, Session};

/// Upper bound of every wait.
const BOUND: Duration = Duration::from_secs(60);
/// Acquisitions per contender (ours and the peers').
const ITERATIONS: usize = 5;
/// How long every contender holds the lock.
const HOLD_MS: u64 = 20;

/// Awaits `fut`, failing the test if it is still pending after `BOUND`.
async fn within<T>(what: &str, fut: impl Future<Output = T>) -> T {
    tokio::time::timeout(BOUND, fut)
        .await
        .unwrap_or_else(|_| panic!("{what}: still pending after {BOUND:?}"))
}

async fn session() -> Session {
    within(
        "connect",
        Session::builder(shared_server().connect_string())
            .with_session_timeout(Duration::from_secs(4))
            .connect(),
    )
    .await
    .expect("connect")
}

async fn close(s: Session) {
    within("session close", s.close()).await;
}

/// The names of `lock`'s contender nodes, in queue order.
async fn names(lock: &FairLock) -> Vec<String> {
    within("contenders", lock.contenders())
        .await
        .expect("contenders")
        .into_iter()
        .map(|c| c.node.name)
        .collect()
}

fn parse(node: &str) -> NodeName {
    let name = node.rsplit('/').next().unwrap_or(node);
    NodeName::parse(name).unwrap_or_else(|| panic!("{node} is not a contender node name"))
}

fn seq_of(node: &str) -> i64 {
    node_sequence(node).unwrap_or_else(|| panic!("{node} has no sequence suffix"))
}

/// One hold of ours: the event (token = node sequence) and the fencing token (czxid).
struct OurHold {
    event: Event,
    fencing_token: i64,
}

/// Our contender: `ITERATIONS` acquisitions, each held `HOLD_MS`.
async fn ours(lock: FairLock, who: String, layout: Layout) -> Vec<OurHold> {
    let mut holds = Vec::new();
    for _ in 0..ITERATIONS {
        let g = within(&who, lock.lock())
            .await
            .unwrap_or_else(|e| panic!("{who}: lock: {e}"));
        let acquired = monotonic_nanos();
        tokio::time::sleep(Duration::from_millis(HOLD_MS)).await;
        let node = parse(g.path());
        assert_eq!(
            (node.kind, node.layout),
            (NodeKind::Lock, layout),
            "{who}: {}",
            g.path()
        );
        assert!(!g.is_lost(), "{who}: lost the lock while holding it");
        let released = monotonic_nanos();
        let fencing_token = g.fencing_token();
        within(&who, g.release())
            .await
            .unwrap_or_else(|e| panic!("{who}: release: {e}"));
        holds.push(OurHold {
            event: Event::new(&who, Kind::Exclusive, acquired, released)
                .with_token(node.sequence.expect("a queue node")),
            fencing_token,
        });
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    holds
}

/// Starts the peers and waits until each is connected.
async fn start_peers(peers: Vec<(String, Vec<String>)>) -> Vec<Peer> {
    tokio::task::spawn_blocking(move || {
        let mut started = Vec::new();
        for (name, args) in peers {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            started.push(if name.starts_with("curator") {
                Peer::curator(&name, &args)
            } else {
                Peer::kazoo(&name, &args)
            });
        }
        for p in &mut started {
            p.wait_ready(BOUND);
        }
        started
    })
    .await
    .expect("starting peers")
}

/// Waits until `lock`'s directory holds at least `n` contender nodes.
async fn wait_contenders(lock: &FairLock, n: usize, what: &str) {
    let deadline = Instant::now() + BOUND;
    loop {
        let c = names(lock).await;
        if c.len() >= n {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: {} contenders after {BOUND:?}, expected {n}: {c:?}",
            c.len()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A peer of a mixed run: label (`curator…` runs Interop.java, anything else kazoo), its
/// arguments, and the layout its node names must follow.
struct PeerSpec {
    label: &'static str,
    args: Vec<String>,
    layout: Layout,
}

fn peer(label: &'static str, layout: Layout, args: &[&str]) -> PeerSpec {
    PeerSpec {
        label,
        args: args.iter().map(|s| s.to_string()).collect(),
        layout,
    }
}

/// Runs the peers and our contenders on one path behind a gate and checks the merged history.
async fn run_mixed(label: &str, path: &str, peers: Vec<PeerSpec>, our: &[(&str, Layout)]) {
    let started = Instant::now();
    // Given our gate holding the lock
    let gate_session = session().await;
    let gate = FairLock::new(&gate_session, path)
        .unwrap()
        .with_data(b"gate".to_vec());
    let g = within("gate: lock", gate.lock()).await.expect("gate: lock");
    let gate_acquired = monotonic_nanos();
    let gate_seq = seq_of(g.path());

    // and every peer and every contender of ours queued behind it
    let layouts: Vec<(String, Layout)> = peers
        .iter()
        .map(|p| (p.label.to_string(), p.layout))
        .collect();
    let n_peers = peers.len();
    let peers = start_peers(
        peers
            .into_iter()
            .map(|p| (p.label.to_string(), p.args))
            .collect(),
    )
    .await;
    wait_contenders(&gate, 1 + n_peers, label).await;
    let mut sessions = Vec::new();
    let mut tasks = Vec::new();
    for (who, layout) in our {
        let s = session().await;
        let lock = FairLock::new(&s, path)
            .unwrap()
            .with_layout(*layout)
            .with_data(who.as_bytes().to_vec());
        sessions.push(s);
        tasks.push(tokio::spawn(ours(lock, who.to_string(), *layout)));
    }
    wait_contenders(&gate, 1 + n_peers + our.len(), label).await;

    // When the gate opens and everyone takes the lock ITERATIONS times
    let gate_released = monotonic_nanos();
    within("gate: release", g.release())
        .await
        .expect("gate: release");
    let mut holds = Vec::new();
    for t in tasks {
        let h = within(label, t).await;
        holds.extend(h.expect("our contender panicked"));
    }
    let histories: Vec<PeerHistory> = tokio::task::spawn_blocking(move || finish_all(peers, BOUND))
        .await
        .expect("finishing peers");

    // Then every contender got its turns, with the node names of its layout,
    for h in &histories {
        h.assert_ok();
        assert_eq!(
            h.events().len(),
            ITERATIONS,
            "{}: expected {ITERATIONS} holds: {:#?}",
            h.label,
            h.lines
        );
        let layout = layouts.iter().find(|(l, _)| *l == h.label).unwrap().1;
        for n in h.nodes() {
            let n = n
                .as_deref()
                .unwrap_or_else(|| panic!("{} reported no node", h.label));
            let node = parse(n);
            assert_eq!(
                (node.kind, node.layout),
                (NodeKind::Lock, layout),
                "{}: {n}",
                h.label
            );
        }
    }
    assert_eq!(holds.len(), our.len() * ITERATIONS, "{label}: our holds");

    // the peers' nodes interleaved with ours in the queue (a real contest),
    let ours_seq: Vec<i64> = holds.iter().map(|h| h.event.token.unwrap()).collect();
    let (lo, hi) = (
        *ours_seq.iter().min().unwrap(),
        *ours_seq.iter().max().unwrap(),
    );
    for h in &histories {
        let theirs: Vec<i64> = h.nodes().iter().flatten().map(|n| seq_of(n)).collect();
        assert!(
            theirs.iter().any(|&s| s > lo && s < hi),
            "{label}: {} never queued between our nodes ({lo}..{hi}): {theirs:?}",
            h.label
        );
        assert!(
            theirs.iter().all(|&s| s > gate_seq),
            "{label}: {} queued before the gate?",
            h.label
        );
    }

    // our fencing tokens grew with every hold of ours,
    let fencing: Vec<Event> = holds
        .iter()
        .map(|h| h.event.clone().with_token(h.fencing_token))
        .collect();
    check(&fencing).assert_clean(&format!("{label}: our fencing tokens"));

    // and nobody overlapped anybody, grants following the sequence order across
    // implementations (token = node sequence for every event).
    let mut events: Vec<Event> = holds.into_iter().map(|h| h.event).collect();
    events.push(
        Event::new("ours-gate", Kind::Exclusive, gate_acquired, gate_released).with_token(gate_seq),
    );
    for h in &histories {
        events.extend(h.events_with_seq_tokens());
    }
    assert_eq!(
        events.len(),
        1 + (our.len() + n_peers) * ITERATIONS,
        "{label}: events"
    );
    assert!(
        events.iter().all(|e| e.token.is_some()),
        "{label}: an event without a sequence token"
    );
    check(&events).assert_clean(label);

    // Nothing is left behind.
    let left = names(&gate).await;
    assert!(left.is_empty(), "{label}: nodes left behind: {left:?}");
    for s in sessions {
        close(s).await;
    }
    close(gate_session).await;
    println!(
        "{label}: {} holds checked in {:?}",
        events.len(),
        started.elapsed()
    );
}

fn mutex_args<'a>(
    cs: &'a str,
    path: &'a str,
    it: &'a str,
    hold: &'a str,
    id: &'a str,
) -> Vec<&'a str> {
    vec!["mutex", cs, path, it, hold, id]
}

/// 1. Two Curator InterProcessMutex processes and two of our contenders (Curator layout).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ours_and_curator_mutex_share_a_path() {
    tokio::task::spawn_blocking(build_java)
        .await
        .expect("javac");
    let cs = shared_server().connect_string();
    let path = format!("{}/mutex", unique_root("fair-curator"));
    let (it, hold) = (ITERATIONS.to_string(), HOLD_MS.to_string());
    run_mixed(
        "Curator InterProcessMutex x2 + ours x2",
        &path,
        vec![
            peer(
                "curator1",
                Layout::Curator,
                &mutex_args(&cs, &path, &it, &hold, "c1"),
            ),
            peer(
                "curator2",
                Layout::Curator,
                &mutex_args(&cs, &path, &it, &hold, "c2"),
            ),
        ],
        &[("ours1", Layout::Curator), ("ours2", Layout::Curator)],
    )
    .await;
}

/// 2. Two kazoo Lock processes with kazoo's own names (`<hex>__lock__<seq>`, and
///    `extra_lock_patterns=["-lock-"]` so that they see Curator-named nodes), one contender of
///    ours in each layout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ours_in_both_layouts_and_kazoo_lock_share_a_path() {
    let cs = shared_server().connect_string();
    let path = format!("{}/mutex", unique_root("fair-kazoo"));
    let (it, hold) = (ITERATIONS.to_string(), HOLD_MS.to_string());
    run_mixed(
        "kazoo Lock x2 (default names) + ours (kazoo layout) + ours (Curator layout)",
        &path,
        vec![
            peer(
                "kazoo1",
                Layout::Kazoo,
                &mutex_args(&cs, &path, &it, &hold, "k1"),
            ),
            peer(
                "kazoo2",
                Layout::Kazoo,
                &mutex_args(&cs, &path, &it, &hold, "k2"),
            ),
        ],
        &[
            ("ours-kazoo", Layout::Kazoo),
            ("ours-curator", Layout::Curator),
        ],
    )
    .await;
}

/// 3. Three-way: Curator, kazoo with Curator-sortable names (`<hex>-lock-<seq>`), and ours.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ours_curator_and_kazoo_three_way() {
    tokio::task::spawn_blocking(build_java)
        .await
        .expect("javac");
    let cs = shared_server().connect_string();
    let path = format!("{}/mutex", unique_root("fair-3way"));
    let (it, hold) = (ITERATIONS.to_string(), HOLD_MS.to_string());
    let mut kazoo = mutex_args(&cs, &path, &it, &hold, "k1");
    kazoo.push("--names=curator");
    run_mixed(
        "Curator + kazoo(--names=curator) + ours x2",
        &path,
        vec![
            peer(
                "curator1",
                Layout::Curator,
                &mutex_args(&cs, &path, &it, &hold, "c1"),
            ),
            // `<hex>-lock-<seq>` parses as a Curator-layout lock node (no `_c_` protection)
            peer("kazoo1", Layout::Curator, &kazoo),
        ],
        &[("ours1", Layout::Curator), ("ours2", Layout::Curator)],
    )
    .await;
}

/// Starts a Curator `hold` peer and waits until it holds the lock; returns it and its node.
async fn curator_holder(cs: &str, path: &str, id: &str) -> (Peer, String) {
    let args: Vec<String> = ["hold", cs, path, id]
        .iter()
        .map(|s| s.to_string())
        .collect();
    tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let mut p = Peer::curator("curator-hold", &args);
        p.wait_ready(BOUND);
        let node = p.wait_acquired(BOUND).expect("Curator reports its node");
        (p, node)
    })
    .await
    .expect("starting the Curator holder")
}

/// 4. A Curator process holding the lock blocks us: try_lock is WouldBlock, lock_timeout times
///    out (neither leaves a node), and lock() waits and gets the lock once Curator releases.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn curator_holder_blocks_us_until_it_releases() {
    tokio::task::spawn_blocking(build_java)
        .await
        .expect("javac");
    let cs = shared_server().connect_string();
    let path = format!("{}/mutex", unique_root("fair-curator-hold"));

    // Given a Curator InterProcessMutex holding the lock
    let (mut holder, curator_node) = curator_holder(&cs, &path, "ch").await;
    assert_eq!(parse(&curator_node).layout, Layout::Curator);
    let s = session().await;
    let lock = FairLock::new(&s, &path)
        .unwrap()
        .with_data(b"ours".to_vec());

    // Then try_lock is WouldBlock and leaves no node
    let r = within("try_lock", lock.try_lock()).await;
    assert_eq!(r.map(|g| g.path().to_string()), Err(Error::WouldBlock));
    assert_eq!(names(&lock).await, vec![curator_node.clone()]);

    // and lock_timeout gives up with Timeout, leaving no node either
    let t0 = Instant::now();
    let r = within(
        "lock_timeout",
        lock.lock_timeout(Duration::from_millis(300)),
    )
    .await;
    assert_eq!(r.map(|g| g.path().to_string()), Err(Error::Timeout));
    assert!(
        t0.elapsed() >= Duration::from_millis(300),
        "{:?}",
        t0.elapsed()
    );
    assert_eq!(names(&lock).await, vec![curator_node.clone()]);

    // When we call lock(), it queues behind Curator and waits
    let waiter = {
        let lock = lock.clone();
        tokio::spawn(async move {
            let g = lock.lock().await;
            (monotonic_nanos(), g)
        })
    };
    wait_contenders(&lock, 2, "our waiter queued").await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        !waiter.is_finished(),
        "lock() returned while Curator holds the lock"
    );
    let c = names(&lock).await;
    assert_eq!(c.len(), 2, "{c:?}");
    assert_eq!(
        c[0], curator_node,
        "Curator must be first in the queue: {c:?}"
    );

    // and gets the lock once Curator releases (its stdin closed)
    holder.close_stdin();
    let (acquired, g) = within("lock() after Curator released", waiter)
        .await
        .expect("waiter panicked");
    let g = g.expect("lock");
    tokio::time::sleep(Duration::from_millis(HOLD_MS)).await;
    let released = monotonic_nanos();
    let seq = seq_of(g.path());
    within("release", g.release()).await.expect("release");
    let h = tokio::task::spawn_blocking(move || holder.finish(BOUND))
        .await
        .expect("finishing Curator");
    h.assert_ok();
    assert_eq!(h.events().len(), 1, "{:#?}", h.lines);
    let curator_released = h.events()[0].released_ns;
    assert!(
        acquired > curator_released,
        "we acquired at {acquired}, before Curator released at {curator_released}"
    );
    assert!(seq > seq_of(&curator_node), "{seq} vs {curator_node}");
    let mut events = h.events_with_seq_tokens();
    events.push(Event::new("ours", Kind::Exclusive, acquired, released).with_token(seq));
    assert_eq!(events.len(), 2);
    check(&events).assert_clean("Curator holder, then ours");
    assert!(names(&lock).await.is_empty());
    close(s).await;
}

/// 4b. A Curator holder that crashes (SIGKILL) keeps blocking us until ZooKeeper expires its
///     session (4 s) and deletes its ephemeral node; only then do we get the lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crashed_curator_holder_blocks_us_until_its_session_expires() {
    tokio::task::spawn_blocking(build_java)
        .await
        .expect("javac");
    let cs = shared_server().connect_string();
    let path = format!("{}/mutex", unique_root("fair-curator-crash"));
    let (mut holder, curator_node) = curator_holder(&cs, &path, "ch").await;
    let s = session().await;
    let lock = FairLock::new(&s, &path).unwrap();
    let waiter = {
        let lock = lock.clone();
        tokio::spawn(async move {
            let g = lock.lock().await;
            (Instant::now(), g)
        })
    };
    wait_contenders(&lock, 2, "our waiter queued").await;

    let killed = Instant::now();
    holder.kill();
    let (acquired, g) = within("lock() after the Curator session expired", waiter)
        .await
        .expect("waiter panicked");
    let g = g.expect("lock");
    let waited = acquired.duration_since(killed);
    // The server expires a session no earlier than its timeout (4 s) after it last heard from
    // the client (pings every ~1.3 s): well over 2 s after the kill.
    assert!(
        waited >= Duration::from_secs(2),
        "got the lock {waited:?} after Curator's crash: before its session could expire"
    );
    let c = names(&lock).await;
    assert_eq!(
        c,
        vec![parse(g.path()).name],
        "Curator's node {curator_node} must be gone"
    );
    within("release", g.release()).await.expect("release");
    drop(holder);
    close(s).await;
    println!("crashed Curator holder: we got the lock {waited:?} after the kill");
}

/// Not a bug of ours but a limit worth pinning (and proof that this harness catches a real
/// overlap): Curator sorts every child by the text after `lock-`, so our kazoo-layout nodes
/// (`<hex>__lock__<seq>`) sort after its own and it ignores them: a Curator mutex takes the
/// lock while one of ours holds it. Only our Curator layout may share a path with Curator.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn curator_ignores_our_kazoo_layout_nodes() {
    tokio::task::spawn_blocking(build_java)
        .await
        .expect("javac");
    let cs = shared_server().connect_string();
    let path = format!("{}/mutex", unique_root("fair-kazoo-vs-curator"));
    let s = session().await;
    let lock = FairLock::new(&s, &path).unwrap().with_layout(Layout::Kazoo);
    let g = within("lock", lock.lock()).await.expect("lock");
    let acquired = monotonic_nanos();
    let args: Vec<String> = ["mutex", &cs, &path, "1", "5", "c"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let mut c = tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let mut c = Peer::curator("curator", &args);
        // Were Curator to see our node, it would wait here and this would panic.
        c.wait_acquired(Duration::from_secs(30));
        c
    })
    .await
    .expect("Curator peer");
    let released = monotonic_nanos();
    within("release", g.release()).await.expect("release");
    c.close_stdin();
    let h = tokio::task::spawn_blocking(move || c.finish(BOUND))
        .await
        .expect("finishing Curator");
    h.assert_ok();
    let mut events = h.events().to_vec();
    events.push(Event::new(
        "ours-kazoo-layout",
        Kind::Exclusive,
        acquired,
        released,
    ));
    assert_eq!(events.len(), 2);
    let r = check(&events);
    assert_eq!(
        r.overlaps.len(),
        1,
        "expected Curator to overlap our kazoo-layout holder: {r}"
    );
    close(s).await;
}

// ---------------------------------------------------------------------------------------------
// Cooperative revocation, with Curator on both sides
// ---------------------------------------------------------------------------------------------

/// Given a revocable holder of ours with a waiter behind it, when a revoker asks it to let go,
/// then its `revoke_requested()` resolves, the waiter is not granted by the request (a
/// request is never a release), and once the holder releases the waiter holds and the request
/// node is gone. A holder made without `with_revocable` is not told. Curator's `Revoker`
/// cannot ask our holder (our nodes take writes from their creator only): it fails, and
/// nothing is handed on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revocable_holder_is_asked_and_the_request_is_no_release() {
    tokio::task::spawn_blocking(build_java)
        .await
        .expect("javac");
    let cs = shared_server().connect_string();
    let path = format!("{}/mutex", unique_root("revoke-ours"));
    let (holder_s, waiter_s, revoker_s) = (session().await, session().await, session().await);
    let guard = FairLock::new(&holder_s, &path)
        .unwrap()
        .with_revocable(true)
        .lock()
        .await
        .unwrap();
    let waiter_lock = FairLock::new(&waiter_s, &path).unwrap();
    let waiting = tokio::spawn(async move { waiter_lock.lock().await });
    wait_contenders(
        &FairLock::new(&revoker_s, &path).unwrap(),
        2,
        "the waiter queued",
    )
    .await;

    // Curator's Revoker on our holder's node: refused, nothing handed on.
    let node_path = guard.path().to_string();
    let curator = tokio::task::spawn_blocking({
        let (cs, node_path) = (cs.clone(), node_path.clone());
        move || {
            let mut p = Peer::curator("curator-revoker", &["revoke", &cs, &node_path]);
            p.wait_for(BOUND, |l| {
                matches!(l, InteropLine::RevokeSent | InteropLine::Err(_))
            })
        }
    })
    .await
    .unwrap();
    assert!(
        matches!(&curator, Some(InteropLine::Err(e)) if e.contains("NoAuth")),
        "Curator's Revoker on our node: {curator:?}"
    );
    assert!(
        !guard.is_revoke_requested(),
        "Curator's failed write asked our holder"
    );

    let asked = zk_recipes::revoke_holders(&revoker_s, &path).await.unwrap();
    assert_eq!(asked.len(), 1, "{asked:?}");
    assert_eq!(asked[0].node(), node_path);
    within("revoke_requested()", guard.revoke_requested()).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!waiting.is_finished(), "the request handed the lock on");
    assert!(!guard.is_lost());
    guard.release().await.unwrap();
    let next = within("the waiter's grant", waiting)
        .await
        .unwrap()
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let left = names(&FairLock::new(&revoker_s, &path).unwrap()).await;
    let raw = support::interop::list_children(&cs, &path);
    assert_eq!(
        raw.len(),
        1,
        "the request node is still there: {raw:?} (contenders {left:?})"
    );

    // A holder that is not revocable is never told.
    let asked = zk_recipes::revoke_holders(&revoker_s, &path).await.unwrap();
    assert_eq!(asked.len(), 1);
    let r = tokio::time::timeout(Duration::from_millis(500), next.revoke_requested()).await;
    assert!(r.is_err(), "a guard made without with_revocable was told");
    next.release().await.unwrap();
    close(holder_s).await;
    close(waiter_s).await;
    close(revoker_s).await;
}

/// Given a Curator holder that made its lock revocable, when we ask it to let go, then it is
/// asked Curator's way (`__REVOKE__` in its node), it releases, and our waiter takes the lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn we_ask_a_revocable_curator_holder_curators_way() {
    tokio::task::spawn_blocking(build_java)
        .await
        .expect("javac");
    let cs = shared_server().connect_string();
    let path = format!("{}/mutex", unique_root("revoke-curator"));
    let (mut holder, node) = tokio::task::spawn_blocking({
        let (cs, path) = (cs.clone(), path.clone());
        move || {
            let mut p = Peer::curator("curator-revocable", &["revocable", &cs, &path, "cr"]);
            p.wait_ready(BOUND);
            let node = p.wait_acquired(BOUND).expect("Curator reports its node");
            (p, node)
        }
    })
    .await
    .unwrap();
    let s = session().await;
    let lock = FairLock::new(&s, &path).unwrap();
    let waiting = tokio::spawn({
        let lock = lock.clone();
        async move { lock.lock().await }
    });
    wait_contenders(&lock, 2, "our waiter queued").await;
    let asked = zk_recipes::revoke(&s, &path, &node).await.unwrap();
    assert!(
        matches!(asked, zk_recipes::Revocation::CuratorMark { .. }),
        "{asked:?}"
    );
    let told = tokio::task::spawn_blocking(move || {
        let told = holder.wait_for(BOUND, |l| {
            matches!(l, InteropLine::Revoked | InteropLine::Err(_))
        });
        (holder, told)
    })
    .await
    .unwrap();
    assert_eq!(
        told.1,
        Some(InteropLine::Revoked),
        "the Curator holder was not asked"
    );
    let guard = within("our grant after Curator let go", waiting)
        .await
        .unwrap()
        .unwrap();
    told.0.finish(BOUND).assert_ok();
    guard.release().await.unwrap();
    close(s).await;
}
