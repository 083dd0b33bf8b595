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
//!   lock's marked delete also WRITE on the node, whose own version it reads too;
//! * any other is deleted again ([`delete_stuck`], conditional on its czxid, as an acquire
//!   does; a node gone or not ours is forgotten there), and on refusal its ACL versions are
//!   kept.
//!
//! So while the ACL stays broken the sweeper costs one `exists` a second per directory (and
//! per simple-lock node), however many nodes are noted in it, and a listing when its children
//! change; a node goes within about a second of its ACL being fixed.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use super::holding::{delete_stuck, Stuck};
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

async fn sweep(epoch: &Epoch, serializers: &PathSerializers) {
    let mut refused_at: HashMap<String, AclVersions> = HashMap::new();
    // Each directory's child version at its last listing.
    let mut listed_at: HashMap<String, i32> = HashMap::new();
    loop {
        tokio::time::sleep(PERIOD).await;
        let Some(notes) = epoch.stuck_or_stop_sweeping() else {
            return;
        };
        refused_at.retain(|path, _| notes.iter().any(|(noted, _)| noted == path));
        let mut by_dir: BTreeMap<&str, Vec<&(String, Noted)>> = BTreeMap::new();
        for note in &notes {
            by_dir
                .entry(crate::path::parent(&note.0))
                .or_default()
                .push(note);
        }
        listed_at.retain(|dir, _| by_dir.contains_key(dir.as_str()));
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
            // Children came or went: a listing forgets the notes of nodes gone
            // (`Epoch::get_children`); without READ on the directory they stay noted, and
            // `delete_stuck` finds them gone when their ACL version says to try.
            if listed_at.get(dir) != Some(&dir_stat.cversion)
                && epoch.get_children(dir).await.is_ok()
            {
                listed_at.insert(dir.to_string(), dir_stat.cversion);
            }
            for (path, noted) in notes {
                if epoch.stuck_note(path) != Some(*noted) {
                    continue;
                }
                let node_acl = if noted.shared {
                    match epoch.check_stat(path).await {
                        Ok(Some(stat)) => stat.aversion,
                        // Gone, or not ours: `delete_stuck` forgets it.
                        Ok(None) => -1,
                        Err(_) => continue,
                    }
                } else {
                    0
                };
                let acl = (dir_stat.aversion, node_acl);
                if refused_at.get(path) == Some(&acl) {
                    continue;
                }
                match delete_stuck(epoch, path, noted.shared.then_some(serializers)).await {
                    Stuck::Yes => {
                        refused_at.insert(path.clone(), acl);
                    }
                    Stuck::No | Stuck::Unknown => {
                        refused_at.remove(path);
                    }
                }
            }
        }
    }
}
