//! The sweeper of an epoch's stuck nodes: nodes of ours whose delete the server refused for
//! lack of permission ([`Epoch::note_stuck`]), tried again until they are gone.
//!
//! # Why
//!
//! A stuck node blocks whoever queues behind it, in every session, until our session ends.
//! The `NoAuth` an acquire answers tells the user to fix the ACL, and once it is fixed the
//! node must go, whether or not anything of ours comes back to its directory. Acquires of
//! ours retry the stuck nodes that block them (`Waiter::blocked_for_good`), but that is not
//! enough: a node of ours may block only others, who block us in turn (review 28: our stuck
//! reader, behind it their writer, behind that our next reader, which readers do not block;
//! our multi-lock waiting in one directory behind theirs, waiting behind our stuck node in
//! the next). Nothing of ours then ever came back to try it.
//!
//! # How
//!
//! One task per epoch, started when the first node is noted ([`ensure`]), ends when no note
//! is left, when the epoch ends (its nodes go with it) or when the session begins to close.
//! Once a second, for each directory with noted nodes, it reads the directory with `exists`
//! (which needs no permission):
//! * when children came or went since it last looked, it lists the directory, which forgets
//!   the notes of nodes gone ([`Epoch::get_children`]);
//! * a node whose ACL versions are those of its last refusal is left alone: the server would
//!   refuse it again. A queue node's delete needs DELETE on the directory only; the simple
//!   lock's marked delete also WRITE on the node, whose own version (and czxid: another node
//!   at the path is not the one noted) it reads when the directory changed, and every ten
//!   seconds else;
//! * any other is deleted again ([`delete_stuck`], conditional on its czxid, as an acquire
//!   does; a node gone or not ours is forgotten there), and on refusal its ACL versions are
//!   kept.
//!
//! So while the ACL stays broken the sweeper costs one `exists` a second per directory, however
//! many nodes are noted in it (and one every ten seconds per simple-lock node), and a listing
//! when its children change (in a directory we may not list, instead, reads of its noted
//! nodes, two a second, until each has been read since the last change); a node goes within about a second of its directory's ACL being
//! fixed (within ten, of a simple-lock node's own). Left: a queue node noted by name whose
//! node an administrator deleted, and at whose exact name (our protection id and sequence
//! number) another client then made one, stays noted while that node lives, for one `exists`
//! a second; nothing is deleted (`delete_stuck` reads the owner first).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use super::holding::{delete_stuck, Stuck};
use zookeeper_client as zk;

use crate::session::{Epoch, Noted, PathSerializers, Session};

/// How often the sweeper looks.
const PERIOD: Duration = Duration::from_secs(1);

/// Starts the epoch's sweeper unless it runs, or nothing is noted. Called wherever a node
/// may have been noted with a session at hand (a refused release, withdrawal or cleanup, an
/// acquire). It holds the epoch and the path serializers, never a [`Session`] handle: a
/// session all of whose handles are dropped closes, sweeper or not.
pub(crate) fn ensure(session: &Session, epoch: &Arc<Epoch>) {
    if !epoch.start_sweeping() {
        return;
    }
    let (epoch, serializers) = (epoch.clone(), session.path_serializers().clone());
    session.spawn_tracked(async move {
        tokio::select! {
            _ = sweep(&epoch, &serializers) => {}
            _ = epoch.lost_token().cancelled() => {}
            _ = epoch.closing().cancelled() => {}
        }
    });
}

/// The ACL versions a node was last refused at: its directory's, and its own (a shared path's
/// node only, whose marked delete needs WRITE on it; 0 for a queue node).
type AclVersions = (i32, i32);

/// How many passes a simple-lock node's own ACL version may go unread while its directory
/// shows no change (review 29: one read a second per such node made the idle cost grow with
/// the notes).
const NODE_READ_EVERY: u64 = 10;

/// How many noted nodes of a directory it may not list the sweeper reads a pass, when the
/// directory's children changed (review 32).
const READS_PER_PASS: usize = 2;

/// What the sweeper knows of a node refused at `acl`.
struct Refused {
    acl: AclVersions,
    /// The directory's ACL and child versions when the node was last read, and the pass.
    dir_seen: (i32, i32),
    read_at: u64,
}

async fn sweep(epoch: &Epoch, serializers: &PathSerializers) {
    let mut refused: HashMap<String, Refused> = HashMap::new();
    // Each directory's child version at its last listing (or reads of its notes).
    let mut listed_at: HashMap<String, i32> = HashMap::new();
    // Directories we may not list, with their ACL version when the listing was refused.
    let mut unlistable: HashMap<String, i32> = HashMap::new();
    // When a note's node was last read and found ours (a directory we may not list), and
    // when the round of such reads of a directory began, at which child version.
    let mut alive_at: HashMap<String, u64> = HashMap::new();
    let mut rounds: HashMap<String, (u64, i32)> = HashMap::new();
    for pass in 0u64.. {
        tokio::time::sleep(PERIOD).await;
        let Some(notes) = epoch.stuck_or_stop_sweeping() else {
            return;
        };
        refused.retain(|path, _| notes.iter().any(|(noted, _)| noted == path));
        let mut by_dir: BTreeMap<&str, Vec<&(String, Noted)>> = BTreeMap::new();
        for note in &notes {
            by_dir
                .entry(crate::path::parent(&note.0))
                .or_default()
                .push(note);
        }
        listed_at.retain(|dir, _| by_dir.contains_key(dir.as_str()));
        unlistable.retain(|dir, _| by_dir.contains_key(dir.as_str()));
        rounds.retain(|dir, _| by_dir.contains_key(dir.as_str()));
        alive_at.retain(|path, _| notes.iter().any(|(noted, _)| noted == path));
        for (dir, notes) in by_dir {
            let dir_stat = match epoch.check_stat(dir).await {
                Ok(Some(stat)) => stat,
                // No directory, no node in it (a node has its parent).
                Ok(None) => {
                    for (path, noted) in notes {
                        epoch.forget_stuck(path, noted.czxid);
                    }
                    continue;
                }
                Err(_) => continue,
            };
            let dir_seen = (dir_stat.aversion, dir_stat.cversion);
            // Children came or went: a listing forgets the notes of nodes gone
            // (`Epoch::get_children`). Without READ on the directory, each noted node is read
            // instead (`exists` needs no permission), and forgotten if gone or not ours:
            // else, the gate skipping it, its note stayed for as long as the session lived,
            // and the sweeper with it (review 31).
            // Those reads are made a few a pass, least recently read first, and the listing
            // is not tried again until the directory's ACL changes: in a directory whose
            // children keep changing, the reads of every note each second made the cost grow
            // with the notes (review 32: 14 requests a second for 12 notes).
            if listed_at.get(dir) != Some(&dir_stat.cversion) {
                // Whether every note of the directory was judged (else it is tried again at
                // the next pass).
                let mut judged = unlistable.get(dir) != Some(&dir_stat.aversion)
                    && match epoch.get_children(dir).await {
                        Ok(_) => true,
                        Err(zk::Error::NoAuth) => {
                            unlistable.insert(dir.to_string(), dir_stat.aversion);
                            false
                        }
                        Err(_) => false,
                    };
                if !judged {
                    // A round of reads starts at each change of the children: every note is
                    // read once in it, two a pass, before the directory counts as judged.
                    let since = match rounds.get(dir) {
                        Some(&(since, cversion)) if cversion == dir_stat.cversion => since,
                        _ => {
                            rounds.insert(dir.to_string(), (pass, dir_stat.cversion));
                            pass
                        }
                    };
                    let mut due: Vec<_> = notes
                        .iter()
                        .filter(|(path, _)| {
                            alive_at.get(path.as_str()).is_none_or(|at| *at < since)
                        })
                        .collect();
                    due.sort_by_key(|(path, _)| alive_at.get(path.as_str()).copied());
                    judged = due.len() <= READS_PER_PASS;
                    for (path, noted) in due.into_iter().take(READS_PER_PASS) {
                        match epoch.check_stat(path).await {
                            Ok(Some(stat)) if noted.is(&stat, epoch.session_id) => {
                                alive_at.insert(path.clone(), pass);
                            }
                            Ok(_) => epoch.forget_stuck(path, noted.czxid),
                            Err(_) => judged = false,
                        }
                    }
                }
                if judged {
                    rounds.remove(dir);
                    listed_at.insert(dir.to_string(), dir_stat.cversion);
                }
            }
            for (path, noted) in notes {
                if epoch.stuck_note(path) != Some(*noted) {
                    continue;
                }
                let known = refused.get_mut(path);
                let node_acl = if !noted.shared {
                    0
                } else if let Some(known) = known.filter(|known| {
                    known.dir_seen == dir_seen && pass - known.read_at < NODE_READ_EVERY
                }) {
                    known.acl.1
                } else {
                    // The node itself: its ACL version, and whether it is still the one
                    // noted. Another node at the path (an administrator deleted ours; we or
                    // someone else made one there since) is not ours to try: forgotten, or
                    // the gate, equal versions and all, kept the sweeper going for as long
                    // as that node lived (review 29).
                    match epoch.check_stat(path).await {
                        Ok(Some(stat)) if noted.is(&stat, epoch.session_id) => {
                            if let Some(known) = refused.get_mut(path) {
                                (known.dir_seen, known.read_at) = (dir_seen, pass);
                            }
                            stat.aversion
                        }
                        Ok(_) => {
                            epoch.forget_stuck(path, noted.czxid);
                            continue;
                        }
                        Err(_) => continue,
                    }
                };
                let acl = (dir_stat.aversion, node_acl);
                if refused.get(path).is_some_and(|known| known.acl == acl) {
                    continue;
                }
                match delete_stuck(epoch, path, noted.shared.then_some(serializers)).await {
                    Stuck::Yes => {
                        let read_at = pass;
                        refused.insert(
                            path.clone(),
                            Refused {
                                acl,
                                dir_seen,
                                read_at,
                            },
                        );
                    }
                    Stuck::No | Stuck::Unknown => {
                        refused.remove(path);
                    }
                }
            }
        }
    }
}
