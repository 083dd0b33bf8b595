//! Listing a queue's contenders (`zkr holders`, `contenders()`).

use std::time::Duration;

use zookeeper_client as zk;

use crate::error::{Error, Result};
use crate::path::{join, NodeKind, NodeName};
use crate::session::Session;

use super::Rule;

/// Whether a listed contender holds or waits.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// It holds the lock, a lease or leadership.
    Holder,
    /// It waits behind a holder.
    Waiter,
    /// Not known from the listing: a semaphore lease whose permit count is stored nowhere
    /// (Curator's and kazoo's semaphores do not store it).
    Unknown,
}

impl Role {
    /// `holder`, `waiter` or `?`, as `zkr holders` prints it.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Holder => "holder",
            Role::Waiter => "waiter",
            Role::Unknown => "?",
        }
    }
}

/// The role of each of `contenders` (in queue order) by the queue's own rules: locks and
/// writers hold alone and only at the front; a reader holds while no lock or writer is ahead
/// of it; the first latch leads; the first `permits` leases hold (`Unknown` when `permits` is
/// `None`). Latches and leases queue apart from the lock kinds. The simple lock's node (no
/// sequence) holds.
///
/// # Examples
///
/// ```
/// # use std::time::Duration;
/// use zk_recipes::{roles, Contender, NodeName, Role};
///
/// let node = |name: &str| Contender {
///     node: NodeName::parse(name).unwrap(),
///     owner: 1,
///     data: Vec::new(),
///     age: Duration::ZERO,
///     czxid: 1,
///     role: Role::Unknown,
/// };
/// let list = [
///     node("_c_0f9a2a2e-7d6e-4c4b-9a53-5b7f6f1d2c3b-__READ__0000000001"),
///     node("_c_0f9a2a2e-7d6e-4c4b-9a53-5b7f6f1d2c3b-__READ__0000000002"),
///     node("_c_0f9a2a2e-7d6e-4c4b-9a53-5b7f6f1d2c3b-__WRIT__0000000003"),
/// ];
/// assert_eq!(roles(&list, None), [Role::Holder, Role::Holder, Role::Waiter]);
/// ```
pub fn roles(contenders: &[Contender], permits: Option<usize>) -> Vec<Role> {
    contenders
        .iter()
        .enumerate()
        .map(|(i, c)| {
            if c.node.sequence.is_none() {
                return Role::Holder;
            }
            let Some(rule) = Rule::of(c.node.kind, permits) else {
                return Role::Unknown;
            };
            let members = Rule::members(c.node.kind);
            let lower: Vec<NodeName> = contenders[..i]
                .iter()
                .filter(|l| l.node.sequence.is_some() && members.contains(&l.node.kind))
                .map(|l| l.node.clone())
                .collect();
            if rule.watch_targets(&lower).is_empty() {
                Role::Holder
            } else {
                Role::Waiter
            }
        })
        .collect()
}

/// One contender of a queue, as listed by `contenders()`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Contender {
    /// The node name and what it stands for.
    pub node: NodeName,
    /// The ZooKeeper session that owns it.
    pub owner: i64,
    /// Its data (our contenders store their identity; Curator stores the client address).
    pub data: Vec<u8>,
    /// How long ago it was created (by the server's clock).
    pub age: Duration,
    /// Its creation zxid: the fencing token it has or would have as holder.
    pub czxid: i64,
    /// Whether it holds or waits, by the queue's rules (see [`roles`]).
    pub role: Role,
}

/// Lists every contender node of `path` (every recipe, Curator and kazoo layouts alike) in
/// queue order: holders first, then waiters. Children that are not contender nodes are left
/// out. Each one's [`role`](Contender::role) follows [`roles`], with the permit count a
/// semaphore of ours stores in the directory. What `zkr holders` shows.
///
/// # Errors
///
/// * [`Error::InvalidPath`] for a malformed path (nothing is sent).
/// * [`Error::Closed`] if the session is closed; [`Error::ZooKeeper`] (or a connection error)
///   if the directory cannot be read. A missing directory is an empty list.
///
/// # Cancel safety
///
/// Cancel safe: it only reads.
pub async fn list_contenders(session: &Session, path: &str) -> Result<Vec<Contender>> {
    crate::path::validate_path(path)?;
    contenders(session, path, &[]).await
}

/// Lists the contenders of `dir` of the given kinds, in queue order.
pub(crate) async fn contenders(
    session: &Session,
    dir: &str,
    members: &[NodeKind],
) -> Result<Vec<Contender>> {
    let epoch = session.epoch().await?;
    // Pipelined: the directory's data (a semaphore's permit count) travels with the listing.
    let list = epoch.get_children(dir);
    let dir_data = epoch.get_data(dir);
    let children = match list.await {
        Ok((c, _)) => c,
        Err(zk::Error::NoNode) => return Ok(Vec::new()),
        Err(err) => return Err(Error::zk("get_children", dir, err)),
    };
    let permits = match dir_data.await {
        Ok((data, _)) => std::str::from_utf8(&data)
            .ok()
            .and_then(|t| t.parse::<usize>().ok()),
        Err(_) => None,
    };
    let mut nodes: Vec<NodeName> = children
        .iter()
        .filter_map(|c| NodeName::parse(c))
        .filter(|n| members.is_empty() || members.contains(&n.kind))
        .collect();
    nodes.sort_by_key(|n| n.sequence);
    // Pipelined: all reads are queued before the first is awaited.
    let reads: Vec<_> = nodes
        .iter()
        .map(|n| epoch.get_data(&join(dir, &n.name)))
        .collect();
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0);
    let mut out = Vec::with_capacity(nodes.len());
    for (node, read) in nodes.into_iter().zip(reads) {
        match read.await {
            Ok((data, stat)) => out.push(Contender {
                node,
                owner: stat.ephemeral_owner,
                data,
                age: Duration::from_millis(now_ms.saturating_sub(stat.ctime).max(0) as u64),
                czxid: stat.czxid,
                role: Role::Unknown,
            }),
            Err(zk::Error::NoNode) => {}
            Err(err) => return Err(Error::zk("get_data", dir, err)),
        }
    }
    for (c, role) in roles(&out, permits).into_iter().enumerate() {
        out[c].role = role;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(name: &str) -> Contender {
        Contender {
            node: NodeName::parse(name).unwrap(),
            owner: 1,
            data: b"x".to_vec(),
            age: Duration::from_secs(1),
            czxid: 1,
            role: Role::Unknown,
        }
    }

    const U: &str = "_c_0f9a2a2e-7d6e-4c4b-9a53-5b7f6f1d2c3b";

    #[test]
    fn lock_queue_roles() {
        let list = [
            c(&format!("{U}-__READ__0000000001")),
            c("5d1e0f2a9b8c4d3e2f1a0b9c8d7e6f5a__rlock__0000000002"),
            c(&format!("{U}-__WRIT__0000000003")),
            c(&format!("{U}-__READ__0000000004")),
        ];
        assert_eq!(
            roles(&list, None),
            [Role::Holder, Role::Holder, Role::Waiter, Role::Waiter]
        );
        let list = [
            c(&format!("{U}-lock-0000000001")),
            c("5d1e0f2a9b8c4d3e2f1a0b9c8d7e6f5a__lock__0000000002"),
        ];
        assert_eq!(roles(&list, None), [Role::Holder, Role::Waiter]);
    }

    #[test]
    fn lease_and_latch_roles() {
        let list = [
            c(&format!("{U}-lease-0000000001")),
            c(&format!("{U}-lease-0000000002")),
            c(&format!("{U}-lease-0000000003")),
        ];
        assert_eq!(
            roles(&list, Some(2)),
            [Role::Holder, Role::Holder, Role::Waiter]
        );
        assert_eq!(roles(&list, None), [Role::Unknown; 3]);
        let list = [
            c(&format!("{U}-latch-0000000001")),
            c(&format!("{U}-latch-0000000002")),
        ];
        assert_eq!(roles(&list, None), [Role::Holder, Role::Waiter]);
    }

    #[test]
    fn the_simple_locks_node_holds() {
        let mut simple = c(&format!("{U}-lock-0000000001"));
        simple.node.sequence = None;
        assert_eq!(roles(&[simple], None), [Role::Holder]);
    }
}
