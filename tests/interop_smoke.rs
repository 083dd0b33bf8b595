//! Smoke test of the interop peers (tests/interop/) and the history checker (tests/support/):
//! Apache Curator and kazoo contending on one ZooKeeper path, histories merged and checked.
//!
//! Needs Debian's zookeeper, libcurator-recipes-java, a JDK and python3-kazoo; the read/write test
//! also builds a virtualenv with PyPI kazoo>=2.9 under target/ on first run. Missing tools FAIL.

mod support;

use std::time::Duration;

use support::history::{check, node_sequence, Kind};
use support::interop::{all_events, build_java, finish_all, list_children, Peer};
use zk_recipes::testing::{shared_server, unique_root};

const T: Duration = Duration::from_secs(120);

fn is_hex32(s: &str) -> bool {
    s.len() == 32
        && s.bytes()
            .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
}

/// `_c_<36-char uuid>-<name><10 digits>`: Curator's protected sequential node.
fn is_curator_node(node: &str, name: &str) -> bool {
    let Some(rest) = node.strip_prefix("_c_") else {
        return false;
    };
    rest.len() == 36 + 1 + name.len() + 10
        && rest.as_bytes()[36] == b'-'
        && rest[37..].starts_with(name)
        && node_sequence(node).is_some()
}

/// `<32 hex><name><10 digits>`: kazoo's lock node.
fn is_kazoo_node(node: &str, name: &str) -> bool {
    node.len() == 32 + name.len() + 10
        && is_hex32(&node[..32])
        && node[32..].starts_with(name)
        && node_sequence(node).is_some()
}

#[test]
fn curator_and_kazoo_mutex_exclude_each_other() {
    build_java();
    let cs = shared_server().connect_string();
    let path = format!("{}/mutex", unique_root("interop"));
    let (iters, hold) = ("6", "25");
    let peers = vec![
        Peer::curator("curator1", &["mutex", &cs, &path, iters, hold, "c1"]),
        Peer::curator("curator2", &["mutex", &cs, &path, iters, hold, "c2"]),
        // --names=curator: kazoo creates <hex>-lock-<seq> nodes, which Curator orders by sequence.
        Peer::kazoo(
            "kazoo1",
            &["mutex", &cs, &path, iters, hold, "k1", "--names=curator"],
        ),
        Peer::kazoo(
            "kazoo2",
            &["mutex", &cs, &path, iters, hold, "k2", "--names=curator"],
        ),
    ];
    let hs = finish_all(peers, T);
    for h in &hs {
        h.assert_ok();
        assert_eq!(h.events().len(), 6, "{}: {:#?}", h.label, h.lines);
        for (e, n) in h.events().iter().zip(h.nodes()) {
            assert_eq!(e.kind, Kind::Exclusive);
            let n = n
                .as_deref()
                .unwrap_or_else(|| panic!("{} reported no node", h.label));
            let ok = if h.label.starts_with("curator") {
                is_curator_node(n, "lock-")
            } else {
                is_kazoo_node(n, "-lock-")
            };
            assert!(ok, "{}: unexpected node name {n}", h.label);
        }
    }
    // token = sequence number: exclusive grants must follow the znode queue order.
    check(&all_events(&hs, true))
        .assert_clean("Curator InterProcessMutex + kazoo Lock(--names=curator)");
}

#[test]
fn curator_waits_for_kazoo_only_with_curator_style_names() {
    build_java();
    let cs = shared_server().connect_string();
    let root = unique_root("interop");

    // kazoo's default "<hex>__lock__<seq>" node: Curator sorts it after its own nodes (its sort key is
    // the text after "lock-"), so it takes the lock while kazoo holds it. kazoo's
    // extra_lock_patterns=["-lock-"] only helps in the other direction.
    let path = format!("{root}/default-names");
    let mut k = Peer::kazoo("kazoo-hold", &["hold", &cs, &path, "kh"]);
    let node = k.wait_acquired(T).expect("kazoo reports its node");
    assert!(is_kazoo_node(&node, "__lock__"), "{node}");
    let c = Peer::curator("curator", &["mutex", &cs, &path, "1", "0", "c"]);
    let ch = c.finish(T);
    ch.assert_ok();
    let kh = k.finish(T);
    kh.assert_ok();
    let mut events = all_events(&[kh, ch], false);
    let r = check(&events);
    assert_eq!(
        r.overlaps.len(),
        1,
        "expected Curator to overlap kazoo's default-named lock: {r}"
    );

    // --names=curator: kazoo creates "<hex>-lock-<seq>", and Curator waits for it.
    let path = format!("{root}/curator-names");
    let mut k = Peer::kazoo("kazoo-hold", &["hold", &cs, &path, "kh", "--names=curator"]);
    let node = k.wait_acquired(T).expect("kazoo reports its node");
    assert!(is_kazoo_node(&node, "-lock-"), "{node}");
    let mut c = Peer::curator("curator", &["mutex", &cs, &path, "1", "0", "c"]);
    c.wait_ready(T);
    assert!(
        c.wait_for(Duration::from_millis(1500), |l| matches!(
            l,
            support::history::InteropLine::Acq { .. }
        ))
        .is_none(),
        "Curator acquired while kazoo holds: {:?}",
        c.lines
    );
    let listing = list_children(&cs, &path);
    assert_eq!(listing.len(), 2, "{listing:?}");
    assert!(
        listing
            .iter()
            .any(|(n, d)| is_kazoo_node(n, "-lock-") && d.ends_with("b'kh'")),
        "{listing:?}"
    );
    assert!(
        listing.iter().any(|(n, _)| is_curator_node(n, "lock-")),
        "{listing:?}"
    );
    let kh = k.finish(T); // closes stdin: kazoo releases
    let ch = c.finish(T);
    kh.assert_ok();
    ch.assert_ok();
    events = all_events(&[kh, ch], true);
    check(&events).assert_clean("Curator waiting for kazoo(--names=curator)");
}

#[test]
fn curator_and_kazoo_read_write_locks() {
    build_java();
    let cs = shared_server().connect_string();
    let path = format!("{}/rw", unique_root("interop"));
    let (iters, hold) = ("5", "25");
    let peers = vec![
        Peer::curator("curator-r1", &["read", &cs, &path, iters, hold, "cr1"]),
        Peer::curator("curator-r2", &["read", &cs, &path, iters, hold, "cr2"]),
        Peer::curator("curator-w", &["write", &cs, &path, iters, hold, "cw"]),
        // PyPI kazoo>=2.9 (venv), Curator's __READ__/__WRIT__ node names
        Peer::kazoo(
            "kazoo-r",
            &["read", &cs, &path, iters, hold, "kr", "--names=curator"],
        ),
        Peer::kazoo(
            "kazoo-w",
            &["write", &cs, &path, iters, hold, "kw", "--names=curator"],
        ),
    ];
    let hs = finish_all(peers, T);
    for h in &hs {
        h.assert_ok();
        assert_eq!(h.events().len(), 5, "{}: {:#?}", h.label, h.lines);
        for (e, n) in h.events().iter().zip(h.nodes()) {
            let name = if e.kind == Kind::Read {
                "__READ__"
            } else {
                "__WRIT__"
            };
            let n = n.as_deref().unwrap_or("-");
            let ok = if h.label.starts_with("curator") {
                is_curator_node(n, name)
            } else {
                is_kazoo_node(n, name)
            };
            assert!(ok, "{}: unexpected node name {n}", h.label);
        }
    }
    check(&all_events(&hs, true)).assert_clean(
        "Curator InterProcessReadWriteLock + kazoo ReadLock/WriteLock(--names=curator)",
    );
}

#[test]
fn curator_leader_latch_one_leader_at_a_time() {
    build_java();
    let cs = shared_server().connect_string();
    let path = format!("{}/latch", unique_root("interop"));
    let peers: Vec<Peer> = (0..3)
        .map(|i| {
            Peer::curator(
                &format!("latch{i}"),
                &["latch", &cs, &path, &format!("L{i}"), "30", "3"],
            )
        })
        .collect();
    let hs = finish_all(peers, T);
    for h in &hs {
        h.assert_ok();
        assert_eq!(h.events().len(), 3);
        for n in h.nodes() {
            assert!(
                is_curator_node(n.as_deref().unwrap_or("-"), "latch-"),
                "{n:?}"
            );
        }
    }
    check(&all_events(&hs, false)).assert_clean("Curator LeaderLatch x3");
}
