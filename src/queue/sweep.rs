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
//!   at the path is not the one noted) it reads when the directory's children changed (two
//!   such nodes a pass, least recently read first), and every ten seconds else;
//! * any other is deleted again ([`delete_stuck`], conditional on its czxid, as an acquire
//!   does; a node gone or not ours is forgotten there), and on refusal its ACL versions are
//!   kept.
//!
//! What it keeps of a directory is tied to the directory's czxid: a directory deleted and
//! made again starts its versions at 0 again, and is judged as a new one.
//!
//! So while the ACL stays broken the sweeper costs one `exists` a second per directory,
//! however many nodes are noted in it (and one read every ten seconds per simple-lock node),
//! and, when its children change, a listing and up to two reads of simple-lock nodes (in a
//! directory we may not list, instead of the listing, reads of its noted nodes, two a second,
//! until each has been read since the last change). A node goes within about a second of its
//! directory's ACL being fixed (within ten of a simple-lock node's own, or half a second per
//! such node of its directory when they are more than twenty). Left: a queue node
//! noted by name whose node an administrator deleted, and at whose exact name (our protection
//! id and sequence number) another client then made one, stays noted while that node lives,
//! for one `exists` a second; nothing is deleted (`delete_stuck` reads the owner first). And
//! N directories with stuck nodes cost N `exists` a second while their ACLs stay broken
//! (review 33): ZooKeeper fires no watch on an ACL change, so only looking tells.

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

/// How many noted nodes of a directory the sweeper reads a pass for a change of the
/// directory's children: in a directory it may not list, to learn whether they are gone
/// (review 32); and simple-lock nodes, to learn whether each is still the one noted (review
/// 33: a parent whose children others keep changing made every such node read every pass).
/// Least recently read first.
const READS_PER_PASS: usize = 2;

/// What the sweeper knows of a node refused at `acl`.
struct Refused {
    acl: AclVersions,
    /// The directory's child version when the node was last read, and the pass.
    children_at: i32,
    read_at: u64,
}

/// What the sweeper knows of a directory with noted nodes; forgotten once none is noted.
#[derive(Default)]
struct DirState {
    /// Which znode the versions below are of: a directory deleted and made again starts its
    /// versions at 0 again, and equal versions of another znode say nothing (review 33).
    czxid: Option<i64>,
    /// Its child version at its last listing (or reads of its notes).
    listed_at: Option<i32>,
    /// When we may not list it: its ACL version when the listing was refused.
    unlistable_at: Option<i32>,
    /// When the round of reads of its notes (a directory we may not list) began, at which
    /// child version.
    round: Option<(u64, i32)>,
}

/// What the sweeper knows of a noted node; forgotten with its note.
#[derive(Default)]
struct NodeState {
    /// At which ACL versions its delete was last refused.
    refused: Option<Refused>,
    /// When it was last read and found ours (in a directory we may not list).
    alive_at: Option<u64>,
}

/// The epoch's notes, by directory (in path order), each in the order given.
type ByDir<'n> = BTreeMap<&'n str, Vec<&'n (String, Noted)>>;

async fn sweep(epoch: &Epoch, serializers: &PathSerializers) {
    let mut sweeper = Sweeper {
        epoch,
        serializers,
        pass: 0,
        dirs: HashMap::new(),
        nodes: HashMap::new(),
    };
    for pass in 0u64.. {
        tokio::time::sleep(PERIOD).await;
        let Some(notes) = epoch.stuck_or_stop_sweeping() else {
            return;
        };
        sweeper.pass = pass;
        let mut by_dir: ByDir = BTreeMap::new();
        for note in &notes {
            by_dir
                .entry(crate::path::parent(&note.0))
                .or_default()
                .push(note);
        }
        sweeper.forget_unnoted(&notes, &by_dir);
        for (dir, notes) in by_dir {
            sweeper.sweep_dir(dir, &notes).await;
        }
    }
}

/// The sweeper's state across passes.
struct Sweeper<'a> {
    epoch: &'a Epoch,
    serializers: &'a PathSerializers,
    /// The current pass.
    pass: u64,
    dirs: HashMap<String, DirState>,
    nodes: HashMap<String, NodeState>,
}

impl Sweeper<'_> {
    /// Forgets what it knew of directories and nodes no longer noted.
    fn forget_unnoted(&mut self, notes: &[(String, Noted)], by_dir: &ByDir) {
        self.nodes
            .retain(|path, _| notes.iter().any(|(noted, _)| noted == path));
        self.dirs.retain(|dir, _| by_dir.contains_key(dir.as_str()));
    }

    /// One pass over a directory: one `exists` of it; when its children changed, a judging of
    /// its notes; then a delete of each noted node whose ACL versions changed.
    async fn sweep_dir(&mut self, dir: &str, notes: &[&(String, Noted)]) {
        let dir_stat = match self.epoch.check_stat(dir).await {
            Ok(Some(stat)) => stat,
            // No directory, no node in it (a node has its parent).
            Ok(None) => {
                for (path, noted) in notes {
                    self.epoch.forget_stuck(path, noted.czxid);
                }
                return;
            }
            Err(_) => return,
        };
        let state = self.dirs.entry(dir.to_string()).or_default();
        if state.czxid != Some(dir_stat.czxid) {
            // First seen, or made again since: what was known was of another znode, whose
            // versions started at 0 as this one's did. Review 33: an administrator deleted our
            // node and the directory and made it again, open, with as many children of others;
            // at equal versions the sweeper neither listed it (which would forget our note) nor
            // deleted again, and sent an `exists` a second for the session's life.
            *state = DirState {
                czxid: Some(dir_stat.czxid),
                ..DirState::default()
            };
            for (path, _) in notes {
                self.nodes.remove(path.as_str());
            }
        }
        if state.listed_at != Some(dir_stat.cversion) {
            self.judge_changed_dir(dir, &dir_stat, notes).await;
        }
        // Least recently read first, for the node reads' share of the pass.
        let mut notes = notes.to_vec();
        notes.sort_by_key(|(path, _)| {
            let node = self.nodes.get(path.as_str());
            node.and_then(|n| n.refused.as_ref()).map(|r| r.read_at)
        });
        let mut reads = READS_PER_PASS;
        for (path, noted) in notes {
            self.retry_delete(path, noted, &dir_stat, &mut reads).await;
        }
    }

    /// Judges the notes of a directory whose children changed since it was last judged: lists
    /// it, or, when it may not be listed, reads its notes a few a pass. Once every note was
    /// judged, the directory counts as judged at its current child version; else it is tried
    /// again at the next pass.
    async fn judge_changed_dir(
        &mut self,
        dir: &str,
        dir_stat: &zk::Stat,
        notes: &[&(String, Noted)],
    ) {
        // Children came or went: a listing forgets the notes of nodes gone
        // (`Epoch::get_children`). Without READ on the directory, each noted node is read
        // instead (`exists` needs no permission), and forgotten if gone or not ours:
        // else, the gate skipping it, its note stayed for as long as the session lived,
        // and the sweeper with it (review 31).
        // Those reads are made a few a pass, least recently read first, and the listing
        // is not tried again until the directory's ACL changes: in a directory whose
        // children keep changing, the reads of every note each second made the cost grow
        // with the notes (review 32: 14 requests a second for 12 notes).
        let judged = self.list(dir, dir_stat.aversion).await
            || self.read_notes(dir, dir_stat.cversion, notes).await;
        if judged {
            let state = self.dirs.entry(dir.to_string()).or_default();
            state.round = None;
            state.listed_at = Some(dir_stat.cversion);
        }
    }

    /// Lists `dir` (which forgets the notes of nodes gone), unless it was refused at the
    /// directory's ACL version `aversion`; whether it was listed.
    async fn list(&mut self, dir: &str, aversion: i32) -> bool {
        if self.dirs.get(dir).and_then(|d| d.unlistable_at) == Some(aversion) {
            return false;
        }
        match self.epoch.get_children(dir).await {
            Ok(_) => true,
            Err(zk::Error::NoAuth) => {
                self.dirs.entry(dir.to_string()).or_default().unlistable_at = Some(aversion);
                false
            }
            Err(_) => false,
        }
    }

    /// Reads up to [`READS_PER_PASS`] notes of `dir` (a directory we may not list, its
    /// children now at `cversion`) not yet read in this round, least recently read first;
    /// forgets those gone or not ours. Whether every note has now been read in the round.
    async fn read_notes(&mut self, dir: &str, cversion: i32, notes: &[&(String, Noted)]) -> bool {
        // A round of reads starts at each change of the children: every note is
        // read once in it, two a pass, before the directory counts as judged.
        let pass = self.pass;
        let round = &mut self.dirs.entry(dir.to_string()).or_default().round;
        let since = match *round {
            Some((since, at)) if at == cversion => since,
            _ => {
                *round = Some((pass, cversion));
                pass
            }
        };
        let alive_at = |path: &str| self.nodes.get(path).and_then(|n| n.alive_at);
        let mut due: Vec<_> = notes
            .iter()
            .filter(|(path, _)| alive_at(path).is_none_or(|at| at < since))
            .collect();
        due.sort_by_key(|(path, _)| alive_at(path));
        let mut judged = due.len() <= READS_PER_PASS;
        for (path, noted) in due.into_iter().take(READS_PER_PASS) {
            match self.epoch.check_stat(path).await {
                Ok(Some(stat)) if noted.is(&stat, self.epoch.session_id) => {
                    self.nodes.entry(path.clone()).or_default().alive_at = Some(pass);
                }
                Ok(_) => self.epoch.forget_stuck(path, noted.czxid),
                Err(_) => judged = false,
            }
        }
        judged
    }

    /// Deletes the noted node at `path` again, unless its ACL versions are those of its last
    /// refusal (the server would refuse it again); on refusal, keeps them.
    async fn retry_delete(
        &mut self,
        path: &str,
        noted: &Noted,
        dir_stat: &zk::Stat,
        reads: &mut usize,
    ) {
        if self.epoch.stuck_note(path) != Some(*noted) {
            return;
        }
        let Some(node_acl) = self.node_acl(path, noted, dir_stat.cversion, reads).await else {
            return;
        };
        let acl = (dir_stat.aversion, node_acl);
        let refused = self.nodes.get(path).and_then(|n| n.refused.as_ref());
        if refused.is_some_and(|known| known.acl == acl) {
            return;
        }
        let serializers = noted.shared.then_some(self.serializers);
        match delete_stuck(self.epoch, path, serializers).await {
            Stuck::Yes => {
                self.nodes.entry(path.to_string()).or_default().refused = Some(Refused {
                    acl,
                    children_at: dir_stat.cversion,
                    read_at: self.pass,
                });
            }
            Stuck::No | Stuck::Unknown => {
                if let Some(node) = self.nodes.get_mut(path) {
                    node.refused = None;
                }
            }
        }
    }

    /// The noted node's own ACL version: 0 for a queue node; for a simple-lock node, the one
    /// known from its last refusal while the directory's children (now at `cversion`) show no
    /// change and it was read less than [`NODE_READ_EVERY`] passes ago, or when the pass's
    /// `reads` are spent; else read. `None`: it could not be read, or the node there is not
    /// the one noted (and the note is forgotten).
    ///
    /// A change of the directory's ACL alone needs no read: the versions then differ from the
    /// refusal's anyway, and [`delete_stuck`] reads the node before it deletes.
    async fn node_acl(
        &mut self,
        path: &str,
        noted: &Noted,
        cversion: i32,
        reads: &mut usize,
    ) -> Option<i32> {
        if !noted.shared {
            return Some(0);
        }
        let pass = self.pass;
        let refused = self.nodes.get(path).and_then(|n| n.refused.as_ref());
        // A node never refused to the sweeper is read once, outside the pass's share: the
        // share bounds what comes back every pass, not a note's first try.
        if let Some(known) = refused {
            let fresh = known.children_at == cversion && pass - known.read_at < NODE_READ_EVERY;
            if fresh || *reads == 0 {
                return Some(known.acl.1);
            }
            *reads -= 1;
        }
        // The node itself: its ACL version, and whether it is still the one
        // noted. Another node at the path (an administrator deleted ours; we or
        // someone else made one there since) is not ours to try: forgotten, or
        // the gate, equal versions and all, kept the sweeper going for as long
        // as that node lived (review 29).
        match self.epoch.check_stat(path).await {
            Ok(Some(stat)) if noted.is(&stat, self.epoch.session_id) => {
                if let Some(known) = self.nodes.get_mut(path).and_then(|n| n.refused.as_mut()) {
                    (known.children_at, known.read_at) = (cversion, pass);
                }
                Some(stat.aversion)
            }
            Ok(_) => {
                self.epoch.forget_stuck(path, noted.czxid);
                None
            }
            Err(_) => None,
        }
    }
}
