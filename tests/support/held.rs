//! What the chaos suite's contenders hold: one guard, or a multi-lock. Shared by the suite
//! (`tests/chaos/workload.rs`) and its victim program (`tests/bin/chaos_child.rs`).

use zk_recipes::{LockGuard, MultiGuard, Op};

/// What an acquire holds. A multi-lock's first lock (`a`) gives the token and the path.
pub enum Held {
    One(Box<LockGuard>),
    Many(MultiGuard),
}

impl Held {
    pub fn one(guard: impl Into<LockGuard>) -> Held {
        Held::One(Box::new(guard.into()))
    }

    fn first(&self) -> &LockGuard {
        match self {
            Held::One(g) => g,
            Held::Many(m) => &m.guards()[0],
        }
    }

    pub fn is_lost(&self) -> bool {
        match self {
            Held::One(g) => g.is_lost(),
            Held::Many(m) => m.is_lost(),
        }
    }

    pub fn fencing_token(&self) -> i64 {
        self.first().fencing_token()
    }

    pub fn path(&self) -> &str {
        self.first().path()
    }

    /// Resolves when any of the locks is lost.
    pub fn lost(&self) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>> {
        match self {
            Held::One(g) => Box::pin(g.lost()),
            Held::Many(m) => Box::pin(m.lost()),
        }
    }

    /// Resolves when another process asks to revoke any of the locks.
    pub fn revoke_requested(
        &self,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>> {
        match self {
            Held::One(g) => Box::pin(g.revoke_requested()),
            Held::Many(m) => Box::pin(m.revoke_requested()),
        }
    }

    /// A write applied only while every lock is still ours.
    pub async fn guarded(
        &self,
        ops: Vec<Op>,
    ) -> zk_recipes::Result<Vec<zk_recipes::zk::MultiWriteResult>> {
        match self {
            Held::One(g) => g.guarded(ops).await,
            Held::Many(m) => m.guarded(ops).await,
        }
    }

    /// Releases every lock; the first error.
    pub async fn release(self) -> zk_recipes::Result<()> {
        match self {
            Held::One(g) => (*g).release().await,
            Held::Many(m) => m.release().await,
        }
    }
}
