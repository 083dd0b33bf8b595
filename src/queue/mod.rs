//! The contender queue every queue-based recipe stands on (fair lock, semaphore, read/write
//! lock, leader election).
//!
//! # Znode layout
//!
//! One directory per lock; each contender is an EPHEMERAL_SEQUENTIAL child named as in
//! [`crate::path`] (Curator's `_c_<uuid>-lock-<seq>` by default). Contenders are ordered by the
//! sequence suffix, which the parent assigns in creation order.
//!
//! # Algorithm
//!
//! 1. **One round trip to enter.** `create` and `get_children(dir)` are queued back to back on
//!    the session without awaiting the first; ZooKeeper answers a session's requests in order,
//!    so the listing already contains our node. Missing parents are made as CONTAINER nodes
//!    (the server reaps them once empty) and the pair is sent again.
//! 2. **Who blocks us.** A [`Rule`] says which lower nodes block us: all of them (exclusive
//!    lock, writer, election), the lower writers (reader), or "at least `permits` of them"
//!    (semaphore). Lower sequence numbers never reappear, so what we read below us can only
//!    shrink: we never need to list again to learn about *new* blockers.
//! 3. **No herd.** We watch the nearest blocker with an `exists` watch, plus our own node (to
//!    notice it being deleted by someone else) with a child watch, which a data change does
//!    not fire and a deletion fires after the node's data watches: the waiter behind a
//!    release hears of it before the releaser does (see [`Epoch::watch_own`]). A semaphore waiter with exactly `permits`
//!    members below it is the head of the queue and watches all of them (each holds a lease;
//!    whichever leaves first frees the one it needs, whatever the release order); a waiter
//!    further back watches only its predecessor, which bumps its node's version when it is
//!    granted, so the waiter behind learns that it is the head now. A release wakes one
//!    waiter; a head that was granted keeps the other holders' watches until they fire once.
//! 4. **One notification per hand-off.** The release of a node that holds alone (a lock,
//!    writer or leader node) is one `multi`: `set_data(node, MARK)` then `delete(node)`, and a
//!    waiter whose watch fires NodeDataChanged on such a node takes the lock with no request at
//!    all. (A reader's or a lease's release is a plain `delete`: its mark would grant nobody,
//!    and would cost the server a second operation in every release.) Why that is sound:
//!    * *Only the node's own session can change its data.* Contender nodes are created with
//!      an ACL that grants WRITE and ADMIN to a digest identity that only our session manager
//!      knows (a random user and password per [`Session`], sent as an auth packet on every
//!      connection); anyone else keeps READ and, from the parent, DELETE. A foreign `set` (an
//!      operator, Curator's `Revoker`) fails with `NoAuth`. Such nodes say so in their name
//!      (a version-8 protection id, which Curator's `UUID.randomUUID()` and kazoo's `uuid4`
//!      never make: [`NodeName::is_owner_write_only`]); a data change on any other node is
//!      re-checked like a blip, never taken as a release.
//!    * *Our session writes a lock node's data only in its release*, in the transaction that
//!      deletes it, and a release happens only while the node holds. (A semaphore lease's
//!      version bump is not a release; the semaphore never uses the shortcut.)
//!    * *A node that held alone had nothing below it*: lower sequence numbers never come
//!      back, so when the watched node held, every node below it (all of which were below us
//!      too) was already gone, and it was the last one below us. So the mark, seen on the
//!      node we watch, proves that nothing below us exists; only our own node remains to be
//!      checked, which the own-node watch does (its event is delivered first if the node went
//!      in the same window).
//!
//!    On a plain deletion (a cancelled waiter, an expired session, a Curator or kazoo holder,
//!    or a released reader) the waiter sends one request: a listing, or, when the node that
//!    went was the last one it knew of below it, an `exists` that checks that its own node is
//!    still there (an administrator deleting the directory deletes both, and the event for
//!    ours may still be on its way). Curator and kazoo re-list every child at each wake-up.
//! 5. **A window, not a snapshot.** A waiter keeps only the nearest few members below it
//!    ([`Rule::window`]), with a flag saying whether more were below: O(1) memory per waiter.
//!    An empty window means "nothing blocks us" only when nothing was cut; else it lists
//!    again. The mark's proof does not depend on the window (nothing can be below a node
//!    that held alone), so a marked hand-off still sends no request.
//! 6. **Ownership.** A node counts as ours only in the epoch (session) that created it, with
//!    `ephemeralOwner` equal to that session id, and a grant is given only while that epoch
//!    lives (a create answered after the loss policy gave up re-queues). When the epoch ends,
//!    a waiter re-queues in the next session (at the back) after deleting any node the old
//!    session may have left; a holder is told through `lost()`. The holder's own-node watch
//!    is armed again after any failed arming for as long as the epoch lives, so a deletion is
//!    never missed. A node left behind by an abandoned acquire is deleted in the background,
//!    retried while the epoch lives.
//! 7. **One path, one kind.** Contenders of other recipes (or a semaphore with another permit
//!    count, stored in the directory's data by the first contender) would not exclude us: the
//!    listing of step 1 shows them, and we refuse with [`Error::PathInUse`] after removing
//!    our node.
//! 8. **Connection loss during create.** The name carries a random protection id chosen before
//!    the request is sent; when the outcome is unknown we look for the id among the children:
//!    found in our session, it is ours; anything else is deleted, never adopted.
//! 9. **Bounded waits stay bounded.** Requests made while the connection is down wait for the
//!    reconnect, so a timed or non-blocking acquire does not wait for its own steps: at its
//!    deadline (or, for a non-blocking one, as soon as the session is not connected) the
//!    attempt is dropped, exactly as a cancelled `lock()` is, and the node it may have made is
//!    cleaned up as in 6 and 8, in the background once the connection is back (see
//!    `acquire::bounded`).

mod acquire;
mod cleanup;
mod contenders;
mod holding;
mod sweep;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Instant;

use zookeeper_client as zk;

use crate::error::Result;
use crate::path::{Layout, NodeKind, NodeName};
use crate::session::{Epoch, Session};

pub(crate) use acquire::{acquire, bounded, relock, WITHDRAW_MARGIN};
pub(crate) use cleanup::{decide_fixed, find_by_protection, Abandoned, Fixed};
pub(crate) use contenders::contenders;
pub use contenders::{list_contenders, roles, Contender, Role};
pub(crate) use holding::{delete_stuck, Holding, Stuck};
pub(crate) use sweep::ensure as ensure_sweeper;

/// The data our release writes just before deleting a contender node (re-exported as
/// `testing::RELEASE_MARK`, for the bench's raw chain that sends our requests).
pub const RELEASE_MARK: &[u8] = b"\x00zk-recipes:released";

/// A boxed one-shot watch.
pub(crate) type WatchFuture = Pin<Box<dyn Future<Output = zk::WatchedEvent> + Send>>;

/// Which lower nodes block a contender.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Rule {
    /// Every lower contender blocks (fair lock, writer, leader election).
    Exclusive,
    /// Lower exclusive nodes (locks, writers) block; lower readers do not.
    Read,
    /// Granted while fewer than `permits` lower contenders exist (semaphore).
    Permits(usize),
}

/// Whether a node of this kind, when it holds, holds alone.
pub(super) fn holds_alone(kind: NodeKind) -> bool {
    matches!(kind, NodeKind::Lock | NodeKind::Write | NodeKind::Latch)
}

impl Rule {
    /// The rule a contender of `kind` follows (`permits` for a lease, if known): what
    /// `zkr holders` and [`list_contenders`] use to tell holders from waiters.
    pub(crate) fn of(kind: NodeKind, permits: Option<usize>) -> Option<Rule> {
        match kind {
            NodeKind::Lock | NodeKind::Write | NodeKind::Latch => Some(Rule::Exclusive),
            NodeKind::Read => Some(Rule::Read),
            NodeKind::Lease => permits.map(Rule::Permits),
        }
    }

    /// The node kinds that queue with a contender of `kind`.
    pub(crate) fn members(kind: NodeKind) -> &'static [NodeKind] {
        match kind {
            NodeKind::Latch => &[NodeKind::Latch],
            NodeKind::Lease => &[NodeKind::Lease],
            _ => LOCK_MEMBERS,
        }
    }

    pub(crate) fn blocks(self, n: &NodeName) -> bool {
        match self {
            Rule::Read => holds_alone(n.kind),
            _ => true,
        }
    }

    /// The members below us that a waiter keeps (`lower`: all of them, ascending), and
    /// whether some were left out. A waiter needs only the nearest ones: its watch target and
    /// the one it may walk back to when `arm` finds a target gone already. Keeping every
    /// member below would cost O(N) memory per waiter, O(N²) for a queue of N, and the k-th
    /// hand-off would free k parsed names.
    /// Kept: the nearest [`WINDOW`] for an exclusive rule; the nearest `WINDOW` writers for a
    /// reader (lower readers never block it); the nearest `permits + 1` for a semaphore
    /// (enough to tell the head of the queue, which watches `permits` nodes, from a waiter
    /// further back). A waiter whose window is empty while something was cut lists again
    /// before it may take the lock.
    pub(crate) fn window(self, mut lower: Vec<NodeName>) -> (Vec<NodeName>, bool) {
        if let Rule::Read = self {
            lower.retain(|n| self.blocks(n));
        }
        let keep = match self {
            Rule::Exclusive | Rule::Read => WINDOW,
            Rule::Permits(p) => p.saturating_add(1),
        };
        let cut = lower.len().saturating_sub(keep);
        // A new vector for the kept ones: `drain` would keep the room of the whole listing,
        // O(N) per waiter for as long as it waits.
        (lower.split_off(cut), cut > 0)
    }

    /// Given the lower members (ascending), the nodes to watch: none when granted. One node
    /// (the nearest blocker) for locks, writers, readers and elections. A semaphore waiter
    /// with exactly `permits` members below is the head of the queue and watches all of them
    /// (each is a holder: whichever leaves first frees the permit it needs); one further back
    /// watches only its predecessor, which bumps its node's version when it is granted (see
    /// `Waiter::grant_if_first`) so the waiter behind becomes the head. Each release thus
    /// wakes the head alone, whatever the order holders leave in.
    pub(crate) fn watch_targets(self, lower: &[NodeName]) -> Vec<NodeName> {
        match self {
            Rule::Exclusive => lower.last().cloned().into_iter().collect(),
            Rule::Read => lower
                .iter()
                .rev()
                .find(|n| self.blocks(n))
                .cloned()
                .into_iter()
                .collect(),
            Rule::Permits(p) if lower.len() < p => Vec::new(),
            Rule::Permits(p) if lower.len() == p => lower.to_vec(),
            Rule::Permits(_) => lower.last().cloned().into_iter().collect(),
        }
    }
}

/// How many of the nearest blocking members below it a waiter keeps (see [`Rule::window`]).
/// Small on purpose: a plain deletion of the watched node re-lists anyway (see
/// `Waiter::gone`), the walk-back of `arm` re-lists after three misses in a row, and the model
/// test's queues of three to five contenders then cross the cut often.
pub(crate) const WINDOW: usize = 2;

/// How an acquire waits.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Wait {
    /// Never wait: `WouldBlock` if not granted at once.
    Try,
    /// Wait until the deadline (if any).
    Until(Option<Instant>),
}

/// Which node kinds take part in a queue, and which one we create.
#[derive(Debug, Clone)]
pub(crate) struct QueueSpec {
    pub(crate) dir: String,
    pub(crate) layout: Layout,
    pub(crate) kind: NodeKind,
    pub(crate) members: &'static [NodeKind],
    pub(crate) rule: Rule,
    pub(crate) data: Vec<u8>,
    pub(crate) acls: Vec<zk::Acl>,
    pub(crate) requeue_on_expiry: bool,
    /// Whether a grant watches for revocation requests (see `Holding::revocable`).
    pub(crate) revocable: bool,
}

/// Node kinds that take part in a lock directory (Curator and kazoo locks, read/write nodes).
pub(crate) const LOCK_MEMBERS: &[NodeKind] = &[NodeKind::Lock, NodeKind::Read, NodeKind::Write];

impl QueueSpec {
    fn is_member(&self, n: &NodeName) -> bool {
        self.members.contains(&n.kind)
    }

    /// The nodes to watch given the lower members (see [`Rule::watch_targets`]).
    fn watch_targets(&self, lower: &[NodeName]) -> Vec<NodeName> {
        self.rule.watch_targets(lower)
    }

    /// Whether to re-list once `gone` has left, even if it was the last member we know of
    /// below us. A semaphore waiter must (other leases may have gone too). So does a waiter
    /// behind a reader: readers leave in any order, so the ones below are likely gone as
    /// well. After an exclusive node that was the last one below, confirming our own node
    /// is enough (see `Waiter::gone`).
    fn relist_after(&self, gone: &NodeName) -> bool {
        matches!(self.rule, Rule::Permits(_)) || !holds_alone(gone.kind)
    }

    /// Whether a release mark on `watched` proves we hold the lock now.
    fn mark_grants(&self, watched: &NodeName) -> bool {
        !matches!(self.rule, Rule::Permits(_)) && holds_alone(watched.kind)
    }
}

/// A node granted to us.
pub(crate) struct Granted {
    pub(crate) epoch: Arc<Epoch>,
    pub(crate) path: String,
    pub(crate) name: NodeName,
    pub(crate) czxid: i64,
    /// Our own-node watch, if set while waiting (saves a request on a marked hand-off).
    pub(crate) own_watch: Option<WatchFuture>,
}

pub(crate) fn default_spec(
    session: &Session,
    path: &str,
    kind: NodeKind,
    members: &'static [NodeKind],
    rule: Rule,
) -> Result<QueueSpec> {
    session.validate_recipe_path(path)?;
    Ok(QueueSpec {
        dir: path.to_string(),
        layout: Layout::Curator,
        kind,
        members,
        rule,
        data: Vec::new(),
        acls: zk::Acls::anyone_all().to_vec(),
        requeue_on_expiry: true,
        revocable: false,
    })
}

/// Lock options shared by the queue recipes, as consuming `with_*` setters.
macro_rules! queue_options {
    ($ty:ty) => {
        impl $ty {
            /// Data stored in our contender node, e.g. a worker id shown by `contenders()` and
            /// `zkr holders` (default: empty).
            pub fn with_data(mut self, data: impl Into<Vec<u8>>) -> Self {
                std::sync::Arc::make_mut(&mut self.spec).data = data.into();
                self
            }

            /// The ACL of our nodes and of the parents we create (default: open to anyone).
            /// With a digest ACL, sessions without the credentials can neither take the lock
            /// nor delete a holder's node.
            pub fn with_acls(mut self, acls: &[zookeeper_client::Acl]) -> Self {
                std::sync::Arc::make_mut(&mut self.spec).acls = acls.to_vec();
                self
            }

            /// Whether a waiter whose session expires re-queues by itself in the next session
            /// (default `true`); with `false` it fails with `Error::SessionExpired` (or
            /// `Error::Closed` when the session was closed). With `false`, a waiter whose node
            /// someone else deletes (an administrator, or the lock's directory removed) fails
            /// with `Error::LockLost(LossReason::NodeDeleted)` instead of queueing again; a
            /// connection blip in a live session never fails it.
            pub fn with_requeue_on_expiry(mut self, requeue: bool) -> Self {
                std::sync::Arc::make_mut(&mut self.spec).requeue_on_expiry = requeue;
                self
            }

            /// Whether a holder can be asked to let go by another process (default `false`):
            /// its guard's `revoke_requested()` resolves on a request made with
            /// [`revoke`](crate::revoke). Costs one `exists` watch per grant.
            pub fn with_revocable(mut self, revocable: bool) -> Self {
                std::sync::Arc::make_mut(&mut self.spec).revocable = revocable;
                self
            }
        }
    };
}
pub(crate) use queue_options;

#[cfg(test)]
mod tests {
    use super::*;

    fn names(kinds: &str) -> Vec<NodeName> {
        kinds
            .chars()
            .enumerate()
            .map(|(i, k)| {
                let marker = match k {
                    'r' => "__READ__",
                    'w' => "__WRIT__",
                    _ => "lock-",
                };
                NodeName::parse(&format!("_c_x-{marker}{i:010}")).expect("parses")
            })
            .collect()
    }

    #[test]
    fn a_window_does_not_keep_the_room_of_what_it_cut() {
        // The 10,000-waiter drain of the bench grew the client by 389 KB per waiter: each
        // waiter's window kept the capacity of its whole first listing.
        for (rule, kinds) in [
            (Rule::Exclusive, "l".repeat(1000)),
            (Rule::Read, "wr".repeat(500)),
            (Rule::Permits(3), "l".repeat(1000)),
        ] {
            let (kept, cut) = rule.window(names(&kinds));
            assert!(cut);
            assert!(
                kept.capacity() <= kept.len().max(WINDOW) * 2,
                "{rule:?}: {} kept, room for {}",
                kept.len(),
                kept.capacity()
            );
        }
    }

    fn seqs(lower: &[NodeName]) -> Vec<i64> {
        lower.iter().map(|n| n.sequence.unwrap()).collect()
    }

    #[test]
    fn an_exclusive_window_keeps_the_nearest_and_says_it_was_cut() {
        let (kept, cut) = Rule::Exclusive.window(names("lllll"));
        assert_eq!((seqs(&kept), cut), (vec![3, 4], true));
        let (kept, cut) = Rule::Exclusive.window(names("ll"));
        assert_eq!((seqs(&kept), cut), (vec![0, 1], false));
        let (kept, cut) = Rule::Exclusive.window(Vec::new());
        assert_eq!((seqs(&kept), cut), (vec![], false));
    }

    #[test]
    fn a_readers_window_keeps_only_the_nearest_writers() {
        let (kept, cut) = Rule::Read.window(names("wrwrrwr"));
        assert_eq!((seqs(&kept), cut), (vec![2, 5], true));
        let (kept, cut) = Rule::Read.window(names("rrwr"));
        assert_eq!((seqs(&kept), cut), (vec![2], false));
        // Readers below a reader never block it: nothing kept, nothing that matters cut.
        let (kept, cut) = Rule::Read.window(names("rrrr"));
        assert_eq!((seqs(&kept), cut), (vec![], false));
    }

    #[test]
    fn a_semaphore_window_keeps_permits_plus_one() {
        let (kept, cut) = Rule::Permits(2).window(names("lllll"));
        assert_eq!((seqs(&kept), cut), (vec![2, 3, 4], true));
        let (kept, cut) = Rule::Permits(2).window(names("lll"));
        assert_eq!((seqs(&kept), cut), (vec![0, 1, 2], false));
        // A cut window of permits + 1 still watches only the predecessor, as the whole list.
        let all = names("lllll");
        let (kept, _) = Rule::Permits(2).window(all.clone());
        assert_eq!(
            seqs(&Rule::Permits(2).watch_targets(&kept)),
            seqs(&Rule::Permits(2).watch_targets(&all))
        );
    }
}
