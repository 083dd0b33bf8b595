//! Our read/write lock sharing one path with Apache Curator's `InterProcessReadWriteLock`
//! (Curator layout) and with kazoo>=2.9 `ReadLock`/`WriteLock` (kazoo layout), all histories
//! merged on CLOCK_MONOTONIC and checked together.
//!
//! Needs a JDK, Debian's zookeeper and libcurator-recipes-java, python3-venv and PyPI access for
//! the kazoo>=2.9 virtualenv (built once under target/). Missing tools FAIL the tests.

mod support;

use std::time::Duration;

use support::history::{check, node_sequence, Event, Kind};
use support::interop::{build_java, finish_all, Peer, PeerHistory};
use zk_recipes::testing::{monotonic_nanos, shared_server, unique_root};
use zk_recipes::{Layout, RwLock, Session};

/// Upper bound of every wait.
const BOUND: Duration = Duration::from_secs(120);
const ITERATIONS: usize = 8;

async fn session() -> Session {
    tokio::time::timeout(
        Duration::from_secs(20),
        Session::builder(shared_server().connect_string_via_proxy())
            .with_session_timeout(Duration::from_secs(4))
            .connect(),
    )
    .await
    .expect("connect: still pending after 20s")
    .expect("connect")
}

/// One hold, with the sequence number of the node held.
#[derive(Debug, Clone)]
struct Hold {
    event: Event,
    seq: i64,
}

fn seq_of(path: &str) -> i64 {
    node_sequence(path).unwrap_or_else(|| panic!("{path} has no sequence suffix"))
}

/// Our contender: readers read, writers write and, with `downgrade`, keep reading after
/// downgrading.
async fn ours(lock: RwLock, who: String, kind: Kind, downgrade: bool) -> Vec<Hold> {
    let mut holds = Vec::new();
    for i in 0..ITERATIONS {
        let hold = Duration::from_millis(15 + (i as u64 % 3) * 10);
        match kind {
            Kind::Read => {
                let g = lock.read().await.expect("read");
                let acquired = monotonic_nanos();
                tokio::time::sleep(hold).await;
                let released = monotonic_nanos();
                let seq = seq_of(g.path());
                g.release().await.expect("release read");
                holds.push(Hold {
                    event: Event::new(&who, Kind::Read, acquired, released),
                    seq,
                });
            }
            _ => {
                let g = lock.write().await.expect("write");
                let acquired = monotonic_nanos();
                tokio::time::sleep(hold).await;
                let seq = seq_of(g.path());
                let released = monotonic_nanos();
                holds.push(Hold {
                    event: Event::new(&who, Kind::Write, acquired, released).with_token(seq),
                    seq,
                });
                if downgrade {
                    let r = g.downgrade().await.expect("downgrade");
                    let acquired = monotonic_nanos();
                    tokio::time::sleep(hold).await;
                    let released = monotonic_nanos();
                    let seq = seq_of(r.path());
                    r.release().await.expect("release downgraded");
                    holds.push(Hold {
                        event: Event::new(
                            format!("{who}-downgraded"),
                            Kind::Read,
                            acquired,
                            released,
                        ),
                        seq,
                    });
                } else {
                    g.release().await.expect("release write");
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(3)).await;
    }
    holds
}

/// The peers' holds, with the sequence numbers of the nodes they reported.
fn peer_holds(histories: &[PeerHistory]) -> Vec<Hold> {
    let mut holds = Vec::new();
    for h in histories {
        for (event, node) in h.events_with_seq_tokens().into_iter().zip(h.nodes()) {
            let node = node
                .as_deref()
                .unwrap_or_else(|| panic!("{} reported no node name", h.label));
            holds.push(Hold {
                event,
                seq: seq_of(node),
            });
        }
    }
    holds
}

/// For two holds at least one of which is exclusive, the one queued first (lower sequence)
/// must have released before the other acquired.
fn check_queue_order(holds: &[Hold]) -> Vec<String> {
    let mut out = Vec::new();
    for a in holds {
        for b in holds {
            if a.seq < b.seq
                && (a.event.kind.is_exclusive() || b.event.kind.is_exclusive())
                && b.event.acquired_ns < a.event.released_ns
            {
                out.push(format!(
                    "{} (seq {}) acquired at {} before {} (seq {}) released at {}",
                    b.event.who,
                    b.seq,
                    b.event.acquired_ns,
                    a.event.who,
                    a.seq,
                    a.event.released_ns
                ));
            }
        }
    }
    out
}

/// Runs the peers and our contenders on one path and checks the merged history.
async fn run_mixed(label: &str, path: String, layout: Layout, peers: Vec<(String, Vec<String>)>) {
    // Given the peers connected and starting their loops
    let peers = tokio::task::spawn_blocking(move || {
        let mut started = Vec::new();
        for (name, args) in peers {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let peer = if name.starts_with("curator") {
                Peer::curator(&name, &args)
            } else {
                Peer::kazoo(&name, &args)
            };
            started.push(peer);
        }
        for p in &mut started {
            p.wait_ready(BOUND);
        }
        started
    })
    .await
    .expect("starting peers");

    // When our readers and writers (one of which downgrades) contend on the same path
    let mut tasks = Vec::new();
    let mut sessions = Vec::new();
    for (who, kind, downgrade) in [
        ("ours-r1", Kind::Read, false),
        ("ours-r2", Kind::Read, false),
        ("ours-w", Kind::Write, false),
        ("ours-wd", Kind::Write, true),
    ] {
        let s = session().await;
        let lock = RwLock::new(&s, &path).unwrap().with_layout(layout);
        sessions.push(s);
        tasks.push(tokio::spawn(ours(lock, who.to_string(), kind, downgrade)));
    }
    let mut holds = Vec::new();
    for t in tasks {
        let h = tokio::time::timeout(BOUND, t)
            .await
            .unwrap_or_else(|_| panic!("{label}: our contender still pending after {BOUND:?}"));
        holds.extend(h.expect("our contender panicked"));
    }
    let histories = tokio::task::spawn_blocking(move || finish_all(peers, BOUND))
        .await
        .expect("finishing peers");
    for h in &histories {
        h.assert_ok();
        assert_eq!(
            h.events().len(),
            ITERATIONS,
            "{}: expected {ITERATIONS} holds: {:#?}",
            h.label,
            h.lines
        );
    }
    let theirs = peer_holds(&histories);

    // Then everyone ran, nothing conflicting overlapped, and grants followed the queue order
    let (our_min, our_max) = (
        holds.iter().map(|h| h.seq).min().unwrap(),
        holds.iter().map(|h| h.seq).max().unwrap(),
    );
    assert!(
        theirs.iter().any(|h| h.seq > our_min && h.seq < our_max),
        "{label}: expected the peers' nodes to interleave with ours in the queue (ours {our_min}..{our_max}), peers: {:?}",
        theirs.iter().map(|h| h.seq).collect::<Vec<_>>()
    );
    let cross_reads = holds
        .iter()
        .filter(|a| a.event.kind == Kind::Read)
        .map(|a| {
            theirs
                .iter()
                .filter(|b| b.event.kind == Kind::Read && a.event.overlaps(&b.event))
                .count()
        })
        .sum::<usize>();
    println!(
        "{label}: {} holds of ours, {} of the peers, {cross_reads} read-read overlaps across them",
        holds.len(),
        theirs.len()
    );
    holds.extend(theirs);
    // Writers (ours and theirs) carry their sequence number as token: exclusive grants must
    // follow the queue order across implementations.
    let events: Vec<Event> = holds.iter().map(|h| h.event.clone()).collect();
    check(&events).assert_clean(label);
    let order = check_queue_order(&holds);
    assert!(
        order.is_empty(),
        "{label}: queue order violated:\n{}",
        order.join("\n")
    );
    for s in sessions {
        s.close().await;
    }
}

fn args(parts: &[&str]) -> Vec<String> {
    parts.iter().map(|s| s.to_string()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn curator_read_write_lock_and_ours_share_a_path() {
    tokio::task::spawn_blocking(build_java)
        .await
        .expect("javac");
    let cs = shared_server().connect_string();
    let path = format!("{}/rw", unique_root("rw-curator"));
    let it = ITERATIONS.to_string();
    let peers = vec![
        (
            "curator-r".to_string(),
            args(&["read", &cs, &path, &it, "30", "cr"]),
        ),
        (
            "curator-w".to_string(),
            args(&["write", &cs, &path, &it, "20", "cw"]),
        ),
    ];
    run_mixed(
        "Curator InterProcessReadWriteLock + ours (Curator layout)",
        path,
        Layout::Curator,
        peers,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kazoo_read_write_locks_and_ours_share_a_path() {
    let cs = shared_server().connect_string();
    let path = format!("{}/rw", unique_root("rw-kazoo"));
    let it = ITERATIONS.to_string();
    // kazoo's own node names (<hex>__rlock__ / <hex>__lock__), PyPI kazoo>=2.9 from the venv
    let peers = vec![
        (
            "kazoo-r".to_string(),
            args(&["read", &cs, &path, &it, "30", "kr"]),
        ),
        (
            "kazoo-w".to_string(),
            args(&["write", &cs, &path, &it, "20", "kw"]),
        ),
    ];
    run_mixed(
        "kazoo ReadLock/WriteLock + ours (kazoo layout)",
        path,
        Layout::Kazoo,
        peers,
    )
    .await;
}
