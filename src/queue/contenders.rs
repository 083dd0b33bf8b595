//! Listing a queue's contenders (`zkr holders`, `contenders()`).

use std::time::Duration;

use zookeeper_client as zk;

use crate::error::{Error, Result};
use crate::path::{join, NodeKind, NodeName};
use crate::session::Session;

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
}

/// Lists every contender node of `path` (every recipe, Curator and kazoo layouts alike) in
/// queue order: holders first, then waiters. Children that are not contender nodes are left
/// out. What `zkr holders` shows.
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
    let children = match epoch.get_children(dir).await {
        Ok((c, _)) => c,
        Err(zk::Error::NoNode) => return Ok(Vec::new()),
        Err(err) => return Err(Error::zk("get_children", dir, err)),
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
            }),
            Err(zk::Error::NoNode) => {}
            Err(err) => return Err(Error::zk("get_data", dir, err)),
        }
    }
    Ok(out)
}
