//! ZooKeeper path validation and the contender node names of every recipe.
//!
//! Paths are checked before any request is sent, so a typo never leaves a node behind.
//!
//! # Contender node names
//!
//! All queue-based recipes create EPHEMERAL_SEQUENTIAL children of one directory and order them
//! by the ZooKeeper sequence suffix (10 digits, the parent's counter, shared by all children
//! whatever their prefix). The names follow the peers, so mixed fleets share one queue:
//!
//! | who                              | name                                 | kind            |
//! |----------------------------------|--------------------------------------|-----------------|
//! | Curator InterProcessMutex, ours  | `_c_<uuid>-lock-<seq>`               | [`NodeKind::Lock`]  |
//! | Curator read/write lock, ours    | `_c_<uuid>-__READ__<seq>` / `__WRIT__` | `Read` / `Write` |
//! | Curator LeaderLatch, ours        | `_c_<uuid>-latch-<seq>`              | [`NodeKind::Latch`] |
//! | our semaphore                    | `_c_<uuid>-lease-<seq>`              | [`NodeKind::Lease`] |
//! | kazoo Lock / WriteLock, ours (kazoo layout) | `<32 hex>__lock__<seq>`   | `Lock` (kazoo)  |
//! | kazoo ReadLock, ours (kazoo layout) | `<32 hex>__rlock__<seq>`          | `Read` (kazoo)  |
//!
//! The `_c_<uuid>-` (or `<32 hex>`) part is the *protection id*: it is chosen before the create
//! is sent, so after a connection loss mid-create the client finds its own node by it instead
//! of leaving an orphan.

use crate::error::{Error, Result};

/// The most data a contender node may carry: ZooKeeper refuses a request over its
/// `jute.maxbuffer` (1 MiB by default) by dropping the connection, which a client cannot tell
/// from a network failure, so an oversized create was retried for ever and took the session's
/// connection down each time. Checked before anything is sent.
pub(crate) const MAX_NODE_DATA: usize = 1_000_000;

/// [`Error::InvalidArgument`] for node data over [`MAX_NODE_DATA`]; `what` names it.
pub(crate) fn validate_data(what: &str, data: &[u8]) -> Result<()> {
    if data.len() > MAX_NODE_DATA {
        return Err(Error::InvalidArgument(format!(
            "{what} of {} bytes is too large: ZooKeeper refuses node data over about 1 MB \
             (jute.maxbuffer); store a reference to it instead",
            data.len()
        )));
    }
    Ok(())
}

/// Checks that `path` is a valid absolute ZooKeeper path for a recipe.
///
/// Rejects: empty, relative, `/` itself, a trailing `/`, empty segments (`//`), `.` and `..`
/// segments, and characters ZooKeeper refuses (NUL, control characters, U+FFF0..). The
/// recipes' constructors also refuse ZooKeeper's reserved `/zookeeper` tree, judged on the
/// server's path under the session's chroot (this check does not know the session).
///
/// # Examples
///
/// ```
/// use zk_recipes::validate_path;
///
/// assert!(validate_path("/app/locks/nightly").is_ok());
/// assert!(validate_path("app/locks").is_err());
/// assert!(validate_path("/app//locks").is_err());
/// ```
pub fn validate_path(path: &str) -> Result<()> {
    let bad = |reason| {
        Err(Error::InvalidPath {
            path: path.to_string(),
            reason,
        })
    };
    if path.is_empty() {
        return bad("it is empty");
    }
    if !path.starts_with('/') {
        return bad("it is relative (does not start with '/')");
    }
    if path == "/" {
        return bad("the root cannot hold a recipe");
    }
    if path.ends_with('/') {
        return bad("it ends with '/'");
    }
    for segment in path[1..].split('/') {
        match segment {
            "" => return bad("it has an empty segment ('//')"),
            "." | ".." => return bad("it has a '.' or '..' segment"),
            _ => {}
        }
    }
    if path.chars().any(|c| c == '\0') {
        return bad("it contains a NUL character");
    }
    if path.chars().any(|c| {
        c.is_control()
            || ('\u{fff0}'..='\u{ffff}').contains(&c)
            || ('\u{e000}'..='\u{f8ff}').contains(&c)
    }) {
        return bad("it contains a character ZooKeeper does not allow (control or reserved)");
    }
    Ok(())
}

/// Checks a recipe's path: [`validate_path`], and not in ZooKeeper's own tree (`/zookeeper`:
/// its quotas and configuration), where a semaphore would write its permit count into
/// ZooKeeper's own node. Judged on the server's path, `chroot` (if any) joined with `path`:
/// under a chroot `/app`, `/zookeeper` is an ordinary path; under a chroot `/zookeeper`,
/// `/quota` is not (review 21).
pub(crate) fn validate_recipe_path(path: &str, chroot: Option<&str>) -> Result<()> {
    validate_path(path)?;
    let on_server = format!("{}{path}", chroot.unwrap_or(""));
    if on_server == "/zookeeper" || on_server.starts_with("/zookeeper/") {
        return Err(Error::InvalidPath {
            path: path.to_string(),
            reason: "it is in ZooKeeper's reserved /zookeeper tree (quotas, configuration)",
        });
    }
    Ok(())
}

/// Checks a chroot: like [`validate_path`], but `/` is allowed (no chroot).
pub(crate) fn validate_chroot(path: &str) -> Result<()> {
    if path == "/" {
        return Ok(());
    }
    validate_path(path)
}

/// The parent of an absolute path (`/a/b` → `/a`, `/a` → `/`).
pub(crate) fn parent(path: &str) -> &str {
    match path.rfind('/') {
        Some(0) | None => "/",
        Some(i) => &path[..i],
    }
}

/// The last segment of an absolute path (`/a/b` → `b`).
pub(crate) fn child_name(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

/// Joins a directory and a child name.
pub(crate) fn join(dir: &str, name: &str) -> String {
    if dir == "/" {
        format!("/{name}")
    } else {
        format!("{dir}/{name}")
    }
}

/// What a contender node stands for, read from its name.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NodeKind {
    /// An exclusive lock contender (Curator `-lock-`, kazoo `__lock__`).
    Lock,
    /// A reader of a read/write lock (Curator `__READ__`, kazoo `__rlock__`).
    Read,
    /// A writer of a read/write lock (Curator `__WRIT__`).
    Write,
    /// A leader-election candidate (Curator LeaderLatch `-latch-`).
    Latch,
    /// A semaphore lease (ours: `-lease-`).
    Lease,
}

impl NodeKind {
    /// The lowercase name used by `zkr holders` and in logs.
    pub fn as_str(self) -> &'static str {
        match self {
            NodeKind::Lock => "lock",
            NodeKind::Read => "read",
            NodeKind::Write => "write",
            NodeKind::Latch => "latch",
            NodeKind::Lease => "lease",
        }
    }
}

/// The naming convention a node follows.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Layout {
    /// Apache Curator's protected names: `_c_<uuid>-<marker><seq>` (the default).
    #[default]
    Curator,
    /// kazoo's names: `<32 hex>__lock__<seq>` / `<32 hex>__rlock__<seq>`.
    Kazoo,
}

/// A contender node name taken apart.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeName {
    /// The child name, e.g. `_c_1b4e…-lock-0000000007`.
    pub name: String,
    /// The sequence number ZooKeeper appended; `None` for the simple lock's fixed node, which
    /// has no queue.
    pub sequence: Option<i64>,
    /// What the node stands for.
    pub kind: NodeKind,
    /// Whose convention the name follows.
    pub layout: Layout,
    /// The protection id (Curator's uuid or kazoo's hex), if any.
    pub protection: Option<String>,
}

const CURATOR_MARKERS: [(&str, NodeKind); 5] = [
    ("-lock-", NodeKind::Lock),
    ("-__READ__", NodeKind::Read),
    ("-__WRIT__", NodeKind::Write),
    ("-latch-", NodeKind::Latch),
    ("-lease-", NodeKind::Lease),
];
const KAZOO_MARKERS: [(&str, NodeKind); 2] =
    [("__lock__", NodeKind::Lock), ("__rlock__", NodeKind::Read)];

impl NodeName {
    /// Parses a child name; `None` for names that are not recipe contenders.
    ///
    /// # Examples
    ///
    /// ```
    /// use zk_recipes::{NodeKind, NodeName, Layout};
    ///
    /// let n = NodeName::parse("_c_0f9a2a2e-7d6e-4c4b-9a53-5b7f6f1d2c3b-lock-0000000042").unwrap();
    /// assert_eq!((n.sequence, n.kind, n.layout), (Some(42), NodeKind::Lock, Layout::Curator));
    /// let k = NodeName::parse("5d1e0f2a9b8c4d3e2f1a0b9c8d7e6f5a__rlock__0000000003").unwrap();
    /// assert_eq!((k.sequence, k.kind, k.layout), (Some(3), NodeKind::Read, Layout::Kazoo));
    /// assert!(NodeName::parse("readme").is_none());
    /// ```
    pub fn parse(name: &str) -> Option<NodeName> {
        let digits = name.bytes().rev().take_while(u8::is_ascii_digit).count();
        if digits < 10 {
            return None;
        }
        let (head, seq) = name.split_at(name.len() - digits);
        let sequence: i64 = seq.parse().ok()?;
        for (marker, kind) in CURATOR_MARKERS {
            if let Some(prefix) = head.strip_suffix(marker) {
                let protection = prefix.strip_prefix("_c_").map(str::to_string);
                return Some(NodeName {
                    name: name.to_string(),
                    sequence: Some(sequence),
                    kind,
                    layout: Layout::Curator,
                    protection,
                });
            }
        }
        for (marker, kind) in KAZOO_MARKERS {
            if let Some(prefix) = head.strip_suffix(marker) {
                let protection = (!prefix.is_empty()).then(|| prefix.to_string());
                return Some(NodeName {
                    name: name.to_string(),
                    sequence: Some(sequence),
                    kind,
                    layout: Layout::Kazoo,
                    protection,
                });
            }
        }
        None
    }

    /// Whether the name says the node was made by zk-recipes with an owner-only-write ACL:
    /// its protection id is a UUID of version 8 (custom), which Curator (`UUID.randomUUID`)
    /// and kazoo (`uuid4`) never make. Only such a node's data change can be a release mark;
    /// on any other node a data change is someone's write, not a hand-off.
    pub fn is_owner_write_only(&self) -> bool {
        let Some(id) = self.protection.as_deref() else {
            return false;
        };
        // The version nibble: the 15th character of the hyphenated form, the 13th of the
        // simple one.
        let at = match self.layout {
            Layout::Curator if id.len() == 36 => 14,
            Layout::Kazoo if id.len() == 32 => 12,
            _ => return false,
        };
        id.as_bytes()[at] == b'8'
    }
}

/// The marker a new contender of `kind` gets under `layout`, and the kind its name then reads
/// as: kazoo has no writer marker, so a kazoo-layout writer is named (and read back) as a lock.
fn marker(layout: Layout, kind: NodeKind) -> (&'static str, NodeKind) {
    let markers: &[(&'static str, NodeKind)] = match layout {
        Layout::Curator => &CURATOR_MARKERS,
        Layout::Kazoo => &KAZOO_MARKERS,
    };
    markers
        .iter()
        .copied()
        .find(|(_, k)| *k == kind)
        .unwrap_or(markers[0])
}

/// The kind a contender of `kind` made under `layout` reads as from its name (see
/// [`NodeName::parse`]): `kind` itself, except a kazoo-layout writer, which reads as a lock.
pub(crate) fn named_kind(layout: Layout, kind: NodeKind) -> NodeKind {
    marker(layout, kind).1
}

/// Builds the name prefix (before ZooKeeper's sequence) of a new contender.
///
/// Returns `(prefix, protection id)`. Curator: `_c_<uuid>-lock-`; kazoo: `<32 hex>__lock__`.
pub(crate) fn new_prefix(layout: Layout, kind: NodeKind) -> (String, String) {
    // Random, with the version nibble set to 8: see `NodeName::is_owner_write_only`.
    let mut bytes = *uuid::Uuid::new_v4().as_bytes();
    bytes[6] = (bytes[6] & 0x0f) | 0x80;
    let id = uuid::Uuid::from_bytes(bytes);
    let (marker, _) = marker(layout, kind);
    let id = match layout {
        Layout::Curator => id.hyphenated().to_string(),
        Layout::Kazoo => id.simple().to_string(),
    };
    match layout {
        Layout::Curator => (format!("_c_{id}{marker}"), id),
        Layout::Kazoo => (format!("{id}{marker}"), id),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_malformed_paths() {
        for p in [
            "", "a", "/", "/a/", "//a", "/a//b", "/a/./b", "/a/../b", "/.", "/a\0b", "/a\u{1}b",
        ] {
            assert!(
                matches!(validate_path(p), Err(Error::InvalidPath { .. })),
                "{p:?} was accepted"
            );
        }
        for p in ["/a", "/a/b-c_d.e", "/app/locks/job 1"] {
            assert!(validate_path(p).is_ok(), "{p:?} was rejected");
        }
    }

    #[test]
    fn new_prefixes_parse_back() {
        for layout in [Layout::Curator, Layout::Kazoo] {
            for kind in [
                NodeKind::Lock,
                NodeKind::Read,
                NodeKind::Write,
                NodeKind::Latch,
                NodeKind::Lease,
            ] {
                let (prefix, id) = new_prefix(layout, kind);
                let n = NodeName::parse(&format!("{prefix}0000000012")).unwrap();
                assert_eq!(
                    (n.kind, n.layout, n.sequence, n.protection.as_deref()),
                    (named_kind(layout, kind), layout, Some(12), Some(&*id))
                );
                assert!(n.is_owner_write_only(), "{prefix} is not marked as ours");
            }
        }
        // Every kind has a marker of its own in Curator's layout; kazoo has a reader's and a
        // lock's only.
        for kind in [NodeKind::Write, NodeKind::Latch, NodeKind::Lease] {
            assert_eq!(named_kind(Layout::Curator, kind), kind);
            assert_eq!(named_kind(Layout::Kazoo, kind), NodeKind::Lock);
        }
    }

    #[test]
    fn peers_names_are_not_owner_write_only() {
        // A Curator (UUID v4) and a kazoo (uuid4 hex) name: their data may be written by
        // anyone, so a data change on them is never a release.
        for name in [
            "_c_0f9a2a2e-7d6e-4c4b-9a53-5b7f6f1d2c3b-lock-0000000042",
            "5d1e0f2a9b8c4d3e2f1a0b9c8d7e6f5a__lock__0000000003",
            "lock-0000000001",
        ] {
            let n = NodeName::parse(name).unwrap_or(NodeName {
                name: name.into(),
                sequence: Some(1),
                kind: NodeKind::Lock,
                layout: Layout::Curator,
                protection: None,
            });
            assert!(!n.is_owner_write_only(), "{name} taken for ours");
        }
    }

    #[test]
    fn parent_and_join() {
        assert_eq!(parent("/a/b"), "/a");
        assert_eq!(parent("/a"), "/");
        assert_eq!(join("/", "x"), "/x");
        assert_eq!(join("/a", "x"), "/a/x");
    }
}
