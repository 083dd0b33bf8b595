//! The recipes. Each module opens with its znode layout and algorithm.
//!
//! ```text
//!   recipes::exclusive ─┐
//!   recipes::fair_lock ─┤   (recipes::multi: several fair locks in sorted order)
//!   recipes::semaphore ─┼──> crate::queue (contender queue, Holding) ──> crate::session (Epoch: every request)
//!   recipes::rwlock    ─┤                                              └─> crate::path (names, validation)
//!   recipes::election  ─┘
//! ```
//! Recipes never hold a `zookeeper_client::Client`: they talk to ZooKeeper through the
//! session manager's current epoch.

pub mod election;
pub mod exclusive;
pub mod fair_lock;
pub mod multi;
pub mod revoke;
pub mod rwlock;
pub mod semaphore;
