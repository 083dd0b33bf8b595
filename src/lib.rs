//! zk-recipes (work in progress skeleton)
pub mod error;
mod guard;
pub mod path;
pub(crate) mod queue;
pub mod session;

#[path = "../recipes/mod.rs"]
pub mod recipes;

pub use error::{Error, LossReason, Result};
pub use guard::LockGuard;
pub use path::{validate_path, Layout, NodeKind, NodeName};
pub use queue::{list_contenders, Contender};
pub use recipes::exclusive::ExclusiveLock;
pub use recipes::fair_lock::FairLock;
pub use recipes::rwlock::{ReadGuard, RwLock, WriteGuard};
pub use recipes::semaphore::Semaphore;
pub use session::{LossPolicy, Session, SessionBuilder, SessionEvent};
pub use zookeeper_client as zk;

#[cfg(feature = "testing")]
pub mod testing;
