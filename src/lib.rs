//! ZooKeeper coordination recipes for async Rust.
//!
//! * [`Session`]: the session manager every recipe shares. It owns the ZooKeeper session,
//!   reports its state, and builds a new session after expiry (a new *epoch*).
//! * [`FairLock`]: a fair (FIFO) exclusive lock; each waiter watches only its predecessor and
//!   a hand-off costs one write and one notification. Curator `InterProcessMutex` and kazoo
//!   `Lock` compatible.
//! * [`Semaphore`]: at most N holders, in arrival order.
//! * [`RwLock`]: many readers or one writer, writers never starved, safe downgrade. Curator
//!   `InterProcessReadWriteLock` and kazoo `ReadLock`/`WriteLock` compatible.
//! * [`Election`]: leader election, Curator `LeaderLatch` compatible, with an observer stream
//!   and a `LeaderSelector`-style runner.
//! * [`ExclusiveLock`]: the simple one-ephemeral-node lock (has a herd effect).
//!
//! Every guard has `lost()` (resolves when the lock is lost: expiry, the [`LossPolicy`], or
//! the node deleted by someone else), a `fencing_token()` (strictly larger for every later
//! holder), an explicit async `release()` and release on drop.
//!
//! # Getting started
//!
//! ```no_run
//! use std::time::Duration;
//! use zk_recipes::{FairLock, Session};
//!
//! # async fn f() -> zk_recipes::Result<()> {
//! let session = Session::builder("127.0.0.1:2181")
//!     .with_session_timeout(Duration::from_secs(10))
//!     .connect()
//!     .await?;
//! let lock = FairLock::new(&session, "/jobs/nightly")?;
//! let guard = lock.lock().await?;
//! tokio::select! {
//!     _ = guard.lost() => eprintln!("lost the lock"),
//!     _ = tokio::time::sleep(Duration::from_secs(1)) => {} // the work
//! }
//! guard.release().await?;
//! session.close().await;
//! # Ok(()) }
//! ```
//!
//! # Features
//!
//! None is on by default: the library alone depends on no CLI, test or TLS crate, and asks
//! tokio only for `rt`, `time`, `sync`, `macros` and `net`.
//!
//! * `tls`: [`SessionBuilder::with_tls`], connections to ZooKeeper's secure client port
//!   (`zookeeper-client`'s TLS, on rustls).
//! * `testing`: [`testing`](mod@testing), a harness that runs real Apache ZooKeeper servers and
//!   ensembles (from Debian's `zookeeper` package), with a fault-injection proxy. For tests
//!   and demos: add it under `[dev-dependencies]`, e.g.
//!   `zk-recipes = { version = "0.1", features = ["testing"] }`.
//!
//! The `zkr` command is its own package in this repository's workspace (`zkr/`):
//! `cargo install --locked --path zkr` (add `--features tls` for TLS).
//!
//! # Module map
//!
//! ```text
//! recipes::{exclusive, fair_lock, semaphore, rwlock, election}
//!     └─> queue (contender queue, guard machinery) ─> session (Epoch: every request) ─> zookeeper-client
//!         path (validation, node names), error
//! ```
//! Recipes never touch a raw `zookeeper_client::Client`: every request goes through the
//! session manager, which counts them ([`Session::request_count`]) and times them for the
//! loss policy.

#![warn(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]

#[cfg(feature = "cli")]
mod cli;
pub mod error;
mod guard;
mod net;
pub mod observe;
mod parking;
pub mod path;
pub(crate) mod queue;
pub mod session;

#[path = "../recipes/mod.rs"]
pub mod recipes;

pub use error::{Error, LossReason, Result};
pub use guard::LockGuard;
pub use path::{validate_path, Layout, NodeKind, NodeName};
pub use queue::{list_contenders, roles, Contender, Role};
pub use recipes::election::{
    Election, ElectionRunner, Leader, LeaderChange, LeaderChanges, Leadership, Participant,
};
pub use recipes::exclusive::ExclusiveLock;
pub use recipes::fair_lock::FairLock;
pub use recipes::multi::{MultiGuard, MultiLock};
pub use recipes::revoke::{revoke, revoke_holders, Revocation};
pub use recipes::rwlock::{ReadGuard, RwLock, WriteGuard};
pub use recipes::semaphore::Semaphore;
pub use session::{LossPolicy, Op, Session, SessionBuilder, SessionEvent};
pub use zookeeper_client as zk;

#[cfg(feature = "testing")]
#[cfg_attr(docsrs, doc(cfg(feature = "testing")))]
pub mod testing;

/// Locks `m`, poisoned or not: for state that every change writes whole (one insert, remove
/// or `Option`) before anything that may panic runs, so a panic leaves it consistent, and
/// where `unwrap` would turn one panic into a panic at every later lock (a guard's drop, the
/// client's session task waking a guard).
pub(crate) fn locked<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The README's Rust examples, compiled and run by `cargo test --all-features` so that they
/// stay true.
#[cfg(all(doctest, feature = "testing"))]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
