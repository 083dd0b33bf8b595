//! What the chaos suite's contenders hold: one guard, or a multi-lock's guards. Shared by the
//! suite (`tests/chaos/workload.rs`) and its victim program (`tests/bin/chaos_child.rs`).

/// What an acquire holds: one guard, or the multi-lock's two (the first, `a`, gives the
/// token and the path).
pub struct Held(Vec<zk_recipes::LockGuard>);

impl Held {
    pub fn one(guard: impl Into<zk_recipes::LockGuard>) -> Held {
        Held(vec![guard.into()])
    }

    pub fn many(guards: Vec<zk_recipes::LockGuard>) -> Held {
        assert!(!guards.is_empty(), "a multi-lock holds at least one lock");
        Held(guards)
    }

    pub fn is_lost(&self) -> bool {
        self.0.iter().any(zk_recipes::LockGuard::is_lost)
    }

    pub fn fencing_token(&self) -> i64 {
        self.0[0].fencing_token()
    }

    pub fn path(&self) -> &str {
        self.0[0].path()
    }

    /// Resolves when any of the locks is lost.
    pub fn lost(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        let each: Vec<_> = self.0.iter().map(|g| Box::pin(g.lost())).collect();
        async move {
            futures::future::select_all(each).await;
        }
    }

    /// Releases every lock; the first error.
    pub async fn release(self) -> zk_recipes::Result<()> {
        let mut first = Ok(());
        for g in self.0.into_iter().rev() {
            if let (Err(e), true) = (g.release().await, first.is_ok()) {
                first = Err(e);
            }
        }
        first
    }
}
