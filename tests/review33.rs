//! Review 33 (of 8352d39): the sweeper of stuck nodes (src/queue/sweep.rs) and
//! `holding::delete_stuck`, attacked from outside: administrators re-making directories,
//! ACL changes between the sweeper's reads, several directories.
//!
//! Attacked and found safe (no test): an ACL change between the sweeper's `exists` and its
//! delete (the refusal is kept at the version read before, so it is only ever retried too
//! soon, never skipped); a node of ours or of another session made at a stuck shared path
//! after an administrator deleted ours (the read czxid, the serializer and the mark, which
//! needs our per-session digest identity, keep it from being deleted; the note is
//! forgotten); every place a note is forgotten (listing, `exists` of the directory, reads,
//! `delete_stuck`), each conditional on the czxid or, for a name note, on a queue node's
//! unique name; every `note_stuck` followed by `ensure`; expiry, close and dropped handles
//! mid-pass (the task ends on the epoch's and the session's tokens; nothing it holds, the
//! path serializer included, outlives it).
mod support;

use std::time::Duration;

use support::acl::{a_directory_denying_delete, children, churn};
use support::stuck::{a_stuck_node, a_stuck_simple_lock_node};
use support::zk::{admin, requests_in, session};
use zk_recipes::testing::unique_root;
use zk_recipes::zk;

/// Finding 1. The sweeper tells a directory's state by its child version (`cversion`, "did
/// children come or go since the last look") and a node's refusal by the directory's ACL
/// version (`aversion`); both are counters of ONE znode, and both start again at 0 when the
/// directory is deleted and made again. The sweeper never looks at which znode it reads
/// (its czxid).
///
/// Schedule: our fair-lock node is stuck in a directory made denying DELETE (aversion 0);
/// the sweeper's first pass lists the directory (children at version c) and is refused at
/// ACL versions (0, 0). The administrator then cleans up the way the `NoAuth` invites
/// ("fix the ACL"): in one transaction, deletes our node and the directory and makes the
/// directory again, this time open to anyone (aversion 0 again), and c contenders of other
/// clients enter it (children at version c again). From then on the sweeper finds the
/// directory "unchanged" (same cversion: no listing, so the note of our node, long gone, is
/// never forgotten) and the node "refused at these ACL versions" (same aversion: no delete,
/// which would find it gone). The note stays for the life of the session, and the sweeper
/// sends one `exists` a second for ever, with nothing of ours left anywhere.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_directory_made_again_at_the_same_versions_does_not_keep_the_sweeper_going() {
    let admin = admin().await;
    let dir = unique_root("r33-remade-dir");
    a_directory_denying_delete(&admin, &dir).await;
    let s = session().await;
    let _lock = a_stuck_node(&s, &dir).await;
    // The sweeper's first pass: the directory listed, the delete refused at (0, 0).
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let ours = children(&admin, &dir).await;
    assert_eq!(ours.len(), 1, "setup: our stuck node");
    let before = admin
        .check_stat(&dir)
        .await
        .unwrap()
        .expect("setup: the directory");
    assert_eq!(before.aversion, 0, "setup: the directory's ACL as made");
    // In one transaction (no sweeper pass sees a step of it): our node and the directory
    // deleted, the directory made again open to anyone, and as many nodes of others made in
    // it as it had seen child changes.
    let anyone_all = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
    let mut tx = admin.new_multi_writer();
    tx.add_delete(&format!("{dir}/{}", ours[0]), None).unwrap();
    tx.add_delete(&dir, None).unwrap();
    tx.add_create(&dir, b"", &anyone_all).unwrap();
    for i in 0..before.cversion {
        tx.add_create(&format!("{dir}/theirs-{i}"), b"", &anyone_all)
            .unwrap();
    }
    tx.commit()
        .await
        .expect("setup: the administrator's transaction");
    let after = admin
        .check_stat(&dir)
        .await
        .unwrap()
        .expect("setup: made again");
    assert_eq!(
        (after.aversion, after.cversion),
        (before.aversion, before.cversion),
        "setup: the same versions"
    );
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let idle = requests_in(&s, Duration::from_secs(3)).await;
    let later = requests_in(&s, Duration::from_secs(3)).await;
    println!("{idle} then {later} recipe requests in 3 s");
    s.close().await;
    assert_eq!(
        idle, 0,
        "recipe requests in 3 s, our only stuck node long gone with its directory (the \
         sweeper still runs)"
    );
}

/// Finding 2 (cost; review 32's, for simple-lock nodes). A stuck simple-lock node's marked
/// delete also needs WRITE on the node, so the sweeper reads the node's own ACL version
/// (`Sweeper::node_acl`), from its last refusal "while the directory shows no change". But
/// the change it looks at is the directory's child version: any node of anyone coming or
/// going in the directory. Simple locks are paths under a common parent (`/locks/a`,
/// `/locks/b`, ...), whose children change whenever anyone's lock is taken or released.
/// Then every pass reads every noted simple-lock node: the cost grows with the notes while
/// nothing of ours, and no ACL, changes.
///
/// Schedule: 12 simple locks of ours under one directory denying DELETE, each released
/// (refused, stuck, noted). Someone else's lock under the same directory is taken and
/// released twice a second. Nothing else changes; the sweeper's first passes are refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sweepers_cost_for_simple_lock_nodes_in_a_busy_parent_does_not_grow_with_the_notes() {
    const N: usize = 12;
    let admin = admin().await;
    let dir = unique_root("r33-simple-churn");
    a_directory_denying_delete(&admin, &dir).await;
    let s = session().await;
    let mut locks = Vec::new();
    for i in 0..N {
        locks.push(a_stuck_simple_lock_node(&s, &format!("{dir}/lock-{i}")).await);
    }
    // Someone else's simple lock under the same parent, taken and released twice a second.
    let churn = churn(&admin, &dir, "someone-elses-lock");
    // The sweeper's first passes are refused at this ACL version.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let spent = requests_in(&s, Duration::from_secs(4)).await;
    churn.abort();
    s.close().await;
    println!("{spent} recipe requests in 4 s, {N} stuck simple-lock nodes noted");
    // Documented: 1 `exists` + 1 listing a second for the directory, and READS_PER_PASS (2)
    // reads of noted nodes; allow half again (56 before the fix: 14 a second).
    assert!(
        spent <= 24,
        "{spent} requests in 4 s with {N} simple-lock nodes noted in one directory whose \
         children others change (the sweeper's cost grows with the notes)"
    );
}

/// Finding 3 (cost, as documented: "one `exists` a second per directory"). A fair lock, a
/// read/write lock, a semaphore is a directory of its own, so stuck nodes of an application
/// with many locks are each in a directory of their own, and the sweeper's idle cost, one
/// `exists` a second per directory, is one a second per note: reviews 29 and 32 took the
/// per-note cost out only for notes sharing a directory. While the ACLs stay broken (an
/// administrator away for the weekend), nothing changes and the session sends N requests a
/// second for ever (here 10 locks: about 40 requests in 4 s).
///
/// Schedule: 10 fair locks of ours, each in its own directory denying DELETE, each taken and
/// released (refused, stuck, noted). Nothing else happens.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "known cost, kept: one `exists` a second per directory with stuck nodes (src/queue/sweep.rs's \
            module doc); ZooKeeper fires no watch on an ACL change, so a node is seen fixed only by \
            looking, and a longer period would break the promise that it goes within about a second \
            of the fix"]
async fn the_sweepers_idle_cost_does_not_grow_with_notes_in_directories_of_their_own() {
    const N: usize = 10;
    let admin = admin().await;
    let s = session().await;
    let mut locks = Vec::new();
    for i in 0..N {
        let dir = unique_root(&format!("r33-many-dirs-{i}"));
        a_directory_denying_delete(&admin, &dir).await;
        locks.push(a_stuck_node(&s, &dir).await);
    }
    // The sweeper's first passes are refused at these ACL versions.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let spent = requests_in(&s, Duration::from_secs(4)).await;
    s.close().await;
    println!(
        "{spent} recipe requests in 4 s, {N} stuck nodes in {N} directories, nothing changing"
    );
    // What one directory costs (1 `exists` a second), twice over.
    assert!(
        spent <= 8,
        "{spent} requests in 4 s with {N} stuck nodes noted, one per directory, and nothing \
         changing (the sweeper's idle cost grows with the notes)"
    );
}
