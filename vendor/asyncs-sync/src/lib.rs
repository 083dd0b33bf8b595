//! Utilities to synchronize among asynchronous tasks

mod notify;
mod parker;
pub mod watch;

pub use notify::*;
