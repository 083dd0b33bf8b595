//! Shared helpers for integration tests. Use with `mod support;` in a test file.
//!
//! * [`acl`]: an administrator's moves on directories' ACLs (nodes we may create but not delete).
//! * [`held`]: one guard or a multi-lock's guards, as the chaos suite holds them.
//! * [`history`]: record who held what when, and check the history (mutual exclusion, fencing
//!   tokens, FIFO order). Pure Rust, no ZooKeeper needed.
//! * [`rng`]: the seeded generator of the randomized tests.
//! * [`stuck`]: nodes of ours the server will not let us delete (a refused release), and the
//!   scene of a sweeper test (a directory denying DELETE, a session behind a proxy).
//! * [`interop`]: run Apache Curator (`tests/interop/Interop.java`) and kazoo
//!   (`tests/interop/kazoo_interop.py`) peers and turn their output into [`history::Event`]s.
//! * [`zk`]: sessions and raw clients on the shared server of the crate's harness, which
//!   starts every ZooKeeper the tests use.
//!
//! Not every test uses every item, hence the `dead_code`/`unused` allowances.
#![allow(dead_code, unused_imports, unused_macros)]

pub mod acl;
pub mod held;
pub mod history;
pub mod interop;
pub mod rng;
pub mod stuck;
pub mod zk;
