//! The one cleanup-on-drop guard: a node that an acquire may have created and did not hand
//! to a guard (cancelled, timed out, failed, or a create whose outcome is unknown) is deleted
//! in the background, retried while the epoch lives (Curator's "guaranteed delete"), and only
//! if it is ours: found by its protection id (queue nodes), or, at a fixed path (the simple
//! lock), owned by our session and claimed by nothing else in this process (its czxid).

use std::sync::Arc;
use std::time::Duration;

use zookeeper_client as zk;

use crate::error::{failure, Error, Failure, Result};
use crate::path::{join, NodeName};
use crate::session::{Epoch, Session};

/// Where the node to clean up is.
enum Target {
    /// A contender node: by path once known, else by the protection id among `dir`'s children.
    Protected {
        dir: String,
        protection: String,
        path: Option<String>,
    },
    /// The simple lock's node: decided under the path's serialization, which the cleanup
    /// keeps until it is done (see [`Session::serialize_path`]).
    Fixed {
        path: String,
        serial: tokio::sync::OwnedMutexGuard<()>,
    },
}

/// Deletes, when dropped while armed, a node an acquire may have left behind.
pub(crate) struct Abandoned {
    session: Session,
    epoch: Arc<Epoch>,
    target: Option<Target>,
}

impl Abandoned {
    /// For a contender node named with `protection` under `dir`.
    pub(crate) fn protected(
        session: &Session,
        epoch: &Arc<Epoch>,
        dir: &str,
        protection: &str,
    ) -> Abandoned {
        Abandoned {
            session: session.clone(),
            epoch: epoch.clone(),
            target: Some(Target::Protected {
                dir: dir.to_string(),
                protection: protection.to_string(),
                path: None,
            }),
        }
    }

    /// For the node at the fixed `path`, holding its serialization until cleaned up.
    pub(crate) fn fixed(
        session: &Session,
        epoch: &Arc<Epoch>,
        path: &str,
        serial: tokio::sync::OwnedMutexGuard<()>,
    ) -> Abandoned {
        Abandoned {
            session: session.clone(),
            epoch: epoch.clone(),
            target: Some(Target::Fixed {
                path: path.to_string(),
                serial,
            }),
        }
    }

    /// The node's path is known now (the create answered).
    pub(crate) fn set_path(&mut self, known: String) {
        if let Some(Target::Protected { path, .. }) = &mut self.target {
            *path = Some(known);
        }
    }

    /// The node's path, if known.
    pub(crate) fn path(&self) -> Option<&str> {
        match &self.target {
            Some(Target::Protected { path, .. }) => path.as_deref(),
            Some(Target::Fixed { path, .. }) => Some(path),
            None => None,
        }
    }

    /// Nothing to clean up: the node was handed on, or never made.
    pub(crate) fn disarm(&mut self) {
        self.target = None;
    }

    /// Cleans up in the background now, and disarms.
    pub(crate) fn clean_now(&mut self) {
        let Some(target) = self.target.take() else {
            return;
        };
        if self.epoch.lost_token().is_cancelled() {
            // The node goes with its session.
            return;
        }
        let (session, epoch) = (self.session.clone(), self.epoch.clone());
        self.session.spawn_tracked(async move {
            if let Err(err) = clean(&session, &epoch, target).await {
                tracing::warn!(%err, "could not delete an abandoned contender node; it goes when the session ends");
            }
            // A refusal noted the node as stuck (`delete_once`, `holding::retrying`).
            super::sweep::ensure(&session, &epoch);
        });
    }
}

impl Drop for Abandoned {
    fn drop(&mut self) {
        self.clean_now();
    }
}

async fn clean(session: &Session, epoch: &Epoch, target: Target) -> Result<()> {
    match target {
        Target::Protected {
            dir,
            protection,
            path,
        } => delete_ours(epoch, &dir, &protection, path.as_deref()).await,
        Target::Fixed { path, serial } => {
            let _serial = serial;
            if let Fixed::Ours(czxid) = decide_fixed(session, epoch, &path).await {
                // Conditional on the czxid (read again just before), retried.
                let deleted = super::holding::delete_if_czxid(epoch, &path, czxid).await;
                session.unclaim(czxid);
                match deleted {
                    Ok(()) | Err(zk::Error::NoNode) => {}
                    Err(err) => return Err(Error::zk("delete", &path, err)),
                }
            }
            Ok(())
        }
    }
}

/// What the node at a fixed path is to us.
pub(crate) enum Fixed {
    /// Ours, and now claimed for the caller.
    Ours(i64),
    /// Someone else's node (or one a live guard of this process holds).
    Busy,
    /// No node.
    Absent,
    /// The epoch ended before we could tell: its nodes go with it.
    Unknown,
}

/// Decides, under the path's serialization, what became of a create at the fixed `path`
/// whose outcome is unknown: a node there owned by our session and claimed by no guard of
/// this process is the one that create made, and is claimed for the caller. Reads until it
/// gets an answer, for as long as the epoch lives.
pub(crate) async fn decide_fixed(session: &Session, epoch: &Epoch, path: &str) -> Fixed {
    let mut backoff = Duration::from_millis(20);
    loop {
        if epoch.is_over() {
            return Fixed::Unknown;
        }
        // Sent after the create, so it sees what the create did.
        match epoch.check_stat(path).await {
            Ok(None) => return Fixed::Absent,
            // Not a node of ours whose delete was refused (`Epoch::note_stuck`): that one is
            // left over, not made by this create, and `holding::delete_stuck` may delete it
            // (review 24: once its czxid was no longer among the retired claims, it could be
            // taken for a new guard's node).
            Ok(Some(stat)) if epoch.is_stuck(path, Some(stat.czxid)) => return Fixed::Busy,
            Ok(Some(stat)) if stat.ephemeral_owner == epoch.session_id => {
                return if session.claim(stat.czxid) {
                    Fixed::Ours(stat.czxid)
                } else {
                    Fixed::Busy
                };
            }
            Ok(Some(_)) => return Fixed::Busy,
            Err(err) if failure(&err) == Failure::Unknown => {
                // Requests made while disconnected wait for the reconnect; back off anyway.
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(1));
            }
            Err(_) => return Fixed::Unknown,
        }
    }
}

/// Deletes our node: by path if known, else by finding the protection id among the children.
/// A failure that leaves the outcome unknown (connection loss, timeout) is retried with
/// backoff for as long as the epoch lives: a node of a live session left behind an abandoned
/// acquire would block the queue until the session ends.
async fn delete_ours(epoch: &Epoch, dir: &str, protection: &str, path: Option<&str>) -> Result<()> {
    let mut backoff = Duration::from_millis(50);
    loop {
        let once = async {
            let path = match path {
                Some(p) => p.to_string(),
                None => match find_by_protection(epoch, dir, protection).await? {
                    Some((p, _)) => p,
                    None => return Ok(()),
                },
            };
            delete_once(epoch, &path).await
        };
        match once.await {
            Err(err @ (Error::ConnectionLost | Error::Timeout)) => {
                tokio::select! {
                    _ = tokio::time::sleep(backoff) => {}
                    _ = epoch.lost_token().cancelled() => return Err(err),
                }
                backoff = (backoff * 2).min(Duration::from_secs(2));
            }
            other => return other,
        }
    }
}

async fn delete_once(epoch: &Epoch, path: &str) -> Result<()> {
    match tokio::time::timeout(Duration::from_secs(30), epoch.delete(path, None)).await {
        Ok(Ok(())) | Ok(Err(zk::Error::NoNode)) => Ok(()),
        // Refused for good: the directory's ACL lets us create but not delete. The node
        // stays until the session ends, and an acquire queued behind it is told (review 21:
        // the next `lock()` waited behind it for ever).
        Ok(Err(zk::Error::NoAuth)) => {
            epoch.note_stuck(path, None, false);
            Err(Error::zk("delete", path, zk::Error::NoAuth))
        }
        Ok(Err(err)) => Err(Error::zk("delete", path, err)),
        Err(_) => Err(Error::Timeout),
    }
}

/// Our node among `dir`'s children, by its protection id.
pub(crate) async fn find_by_protection(
    epoch: &Epoch,
    dir: &str,
    protection: &str,
) -> Result<Option<(String, NodeName)>> {
    // A create whose answer was lost is not among the changes the client has seen, so on an
    // ensemble the server it reconnected to may not have applied it yet: catch that server up
    // with the leader first, or the search misses the node (read, not shown to fail: a
    // follower cannot be made to lag on demand in the tests).
    epoch
        .sync(dir)
        .await
        .map_err(|err| Error::zk("sync", dir, err))?;
    let children = match epoch.get_children(dir).await {
        Ok((c, _)) => c,
        Err(zk::Error::NoNode) => return Ok(None),
        Err(err) => return Err(Error::zk("get_children", dir, err)),
    };
    Ok(children
        .into_iter()
        .filter_map(|c| NodeName::parse(&c))
        .find(|n| n.protection.as_deref() == Some(protection))
        .map(|n| (join(dir, &n.name), n)))
}
