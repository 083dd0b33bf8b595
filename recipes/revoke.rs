//! Cooperative revocation: another process asks a holder to let go.
//!
//! # Znode layout
//!
//! ```text
//! <path>/_c_<id>-lock-0000000007     the holder (ours: only its creator may write it)
//! <path>/revoke-<id>                 EPHEMERAL, made by the revoker: "please let go"
//! ```
//!
//! # Algorithm
//!
//! A revocable guard (`with_revocable(true)` on the queue recipes) watches, besides its own
//! node, for a request node named after its node's protection id; when it appears,
//! [`LockGuard::revoke_requested`](crate::LockGuard::revoke_requested) resolves. Letting go
//! stays the holder's decision: a request is never a release, and nothing is handed on until
//! the holder releases. The request is made in one transaction with a check that the
//! holder's node is still there, so it never lands after the holder has gone. It is
//! ephemeral, so it goes with the revoker's session at the latest; before that, it goes with
//! the node it asks: the revoker's session watches that node and deletes its request once the
//! node is gone (released, given up while waiting, or its session over), whether or not the
//! holder was revocable, and a revocable holder that was asked deletes it too when its guard
//! ends.
//!
//! Our contender nodes accept writes from their creator only (that is what makes a foreign
//! write unable to hand the lock on), so the request cannot be Curator's convention of writing
//! `__REVOKE__` into the holder's node: Curator's `Revoker.attemptRevoke` fails on our nodes
//! with `NoAuth`. The other way round works: [`revoke`] asks a Curator holder (any node that is
//! not ours) Curator's way, by writing `__REVOKE__` into its node, which a Curator lock made
//! revocable (`makeRevocable`) acts on. Request names (`revoke-…`) contain none of the markers
//! Curator, kazoo or we look for (`lock-`, `__READ__`, `latch-`, ...): no recipe takes a
//! request for a contender; Curator sorts it after every sequence number, where it blocks no
//! one.

use std::sync::Arc;
use std::time::Duration;

use zookeeper_client as zk;

use crate::error::{Error, Result};
use crate::path::{join, NodeName};
use crate::queue::list_contenders;
use crate::session::{Epoch, Session};
use crate::Role;

/// What Curator's `Revoker` writes into a holder's node.
const CURATOR_REVOKE: &[u8] = b"__REVOKE__";

/// The request node that asks the holder with protection id `protection` in `dir` to let go.
pub(crate) fn request_path(dir: &str, protection: &str) -> String {
    join(dir, &format!("revoke-{protection}"))
}

/// How a holder was asked to let go.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Revocation {
    /// One of ours: the request node was created (or was there already). It is ephemeral in
    /// the revoker's session: keep the session open until the holder has let go. The
    /// revoker's session deletes it once the holder's node is gone.
    Requested {
        /// The holder's node.
        node: String,
        /// The request node.
        request: String,
    },
    /// Someone else's node (Curator's): `__REVOKE__` was written into it, Curator's way. A
    /// Curator lock acts on it only if it was made revocable.
    CuratorMark {
        /// The holder's node.
        node: String,
    },
}

impl Revocation {
    /// The full path of the holder's node.
    pub fn node(&self) -> &str {
        match self {
            Revocation::Requested { node, .. } | Revocation::CuratorMark { node } => node,
        }
    }
}

/// Asks the contender `node` (a child name of `path`) to let go of what it holds.
///
/// # Errors
///
/// * [`Error::InvalidPath`] or [`Error::InvalidArgument`] (not a contender name); nothing is
///   sent.
/// * [`Error::ZooKeeper`] with `NoNode` if there is no such node.
/// * [`Error::NoAuth`] if this session may not create the request (or write a Curator node).
///
/// # Cancel safety
///
/// The request may or may not have been made if the future is dropped.
///
/// # Examples
///
/// ```no_run
/// # async fn f(session: zk_recipes::Session) -> zk_recipes::Result<()> {
/// use zk_recipes::{revoke, FairLock};
///
/// // The holder side: a revocable lock, and a task that lets go when asked.
/// let guard = FairLock::new(&session, "/jobs/report")?.with_revocable(true).lock().await?;
/// tokio::select! {
///     _ = guard.revoke_requested() => println!("asked to let go"),
///     _ = guard.lost() => println!("lost"),
/// }
/// let node = guard.path().rsplit('/').next().unwrap().to_string();
/// guard.release().await?;
/// // Another process: ask whoever holds that node.
/// revoke(&session, "/jobs/report", &node).await?;
/// # Ok(()) }
/// ```
pub async fn revoke(session: &Session, path: &str, node: &str) -> Result<Revocation> {
    session.validate_recipe_path(path)?;
    // A child name: with a `/` it would name a node of another directory (another lock's).
    let name = NodeName::parse(node)
        .filter(|_| !node.contains('/'))
        .ok_or_else(|| Error::InvalidArgument(format!("{node:?} is not a contender node name")))?;
    let node_path = join(path, node);
    let epoch = session.epoch().await?;
    match epoch.check_stat(&node_path).await {
        Ok(Some(_)) => {}
        Ok(None) => return Err(Error::zk("exists", &node_path, zk::Error::NoNode)),
        Err(err) => return Err(Error::zk("exists", &node_path, err)),
    }
    match (name.is_owner_write_only(), name.protection.as_deref()) {
        (true, Some(protection)) => {
            let request = request_path(path, protection);
            // The withdrawal is started once the request is queued, before its answer: a
            // request left there, whatever the answer (lost with the connection, or never
            // awaited by a dropped future), goes with the node it asks.
            // The task waits for the answer when there is one: a request found there already
            // (`NodeExists`) has its withdrawal, ours started by the call that made it, or
            // another revoker's; one never made (a definite refusal) needs none. So repeated
            // calls do not pile up tasks and watches (found by a review, 2026-11-27).
            let made = epoch.create_while_exists(&node_path, &request);
            let (answered, answer) = tokio::sync::oneshot::channel();
            withdraw_when_gone(session, &epoch, node_path.clone(), request.clone(), answer);
            let made = made.await;
            let _ =
                answered.send(made.is_ok() || made.as_ref().is_err_and(crate::error::is_unknown));
            match made {
                // Made, or asked already (by us, or by another revoker).
                Ok(()) | Err(zk::Error::NodeExists) => Ok(Revocation::Requested {
                    node: node_path,
                    request,
                }),
                // The holder left between our look and our request: nobody to ask.
                Err(zk::Error::NoNode) => Err(Error::zk("exists", &node_path, zk::Error::NoNode)),
                Err(err) => Err(Error::zk("create", &request, err)),
            }
        }
        _ => match epoch.set_data(&node_path, CURATOR_REVOKE, None).await {
            Ok(_) => Ok(Revocation::CuratorMark { node: node_path }),
            Err(err) => Err(Error::zk("set_data", &node_path, err)),
        },
    }
}

/// Deletes `request` (ours, if it was made) once the contender `node` it asks is gone, in
/// the background, for as long as the epoch that made it lives (the request is ephemeral: it
/// goes with that session anyway). A holder that was not made revocable never looks at a request, and a
/// waiter asked to let go may give up before it holds: without this the request stayed in
/// the lock's directory as long as the revoker's session, and kept the directory from being
/// reaped. Costs one `exists` watch on the node per request made. `made` says whether the
/// request may have been made (made, or its answer lost); dropped unsent (the caller's future
/// dropped before the answer), it may have been.
fn withdraw_when_gone(
    session: &Session,
    epoch: &Arc<Epoch>,
    node: String,
    request: String,
    made: tokio::sync::oneshot::Receiver<bool>,
) {
    let epoch = Arc::downgrade(epoch);
    session.spawn_at_home(async move {
        if made.await == Ok(false) {
            return;
        }
        let mut backoff = Duration::from_millis(20);
        loop {
            let Some(live) = epoch.upgrade().filter(|e| !e.is_over()) else {
                return;
            };
            let armed = live.check_and_watch_stat(&node).await;
            drop(live);
            match armed {
                Ok((None, _)) => break,
                Ok((Some(_), watcher)) => match watcher.changed().await.event_type {
                    zk::EventType::NodeDeleted => break,
                    // A data change (a Curator-style mark, refused on our nodes) or the
                    // session's end: look again (an over epoch ends the loop).
                    _ => continue,
                },
                Err(_) => {
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(1));
                }
            }
        }
        // Retried while a blip loses the answer; `NoNode`: the holder took it away first, or
        // it was never made.
        let mut backoff = Duration::from_millis(20);
        while let Some(live) = epoch.upgrade().filter(|e| !e.is_over()) {
            let deleted = live.delete(&request, None).await;
            drop(live);
            if !deleted.as_ref().is_err_and(crate::error::is_unknown) {
                return;
            }
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(Duration::from_secs(1));
        }
    });
}

/// Asks every current holder of `path` (by the queue's rules, see
/// [`roles`](crate::roles)) to let go; an empty list if nobody holds it.
///
/// # Errors
///
/// As [`list_contenders`] and [`revoke`]; a holder that has left
/// meanwhile is skipped.
///
/// # Cancel safety
///
/// As [`revoke`].
pub async fn revoke_holders(session: &Session, path: &str) -> Result<Vec<Revocation>> {
    let mut asked = Vec::new();
    for holder in list_contenders(session, path)
        .await?
        .into_iter()
        .filter(|c| c.role == Role::Holder)
    {
        match revoke(session, path, &holder.node.name).await {
            Ok(r) => asked.push(r),
            Err(Error::ZooKeeper {
                source: zk::Error::NoNode,
                ..
            }) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(asked)
}
