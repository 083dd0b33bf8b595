//! The harness's own error: starting or controlling a server is not a recipe failure, so it
//! is kept out of the library's [`crate::Error`].

/// Why the test harness could not do what was asked.
#[non_exhaustive]
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A ZooKeeper server, ensemble or fault proxy could not be started or controlled: Java or
    /// the ZooKeeper jars are missing (`apt-get install -y zookeeper default-jre-headless`), a
    /// port or directory could not be had, or a server did not answer in time.
    #[error("ZooKeeper test harness: {0}")]
    Harness(String),
    /// An argument was refused before anything was started (for example a cluster of 0).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// A ZooKeeper request made for the harness (for example to expire a session) failed.
    #[error(transparent)]
    Recipe(#[from] crate::Error),
}

/// The harness's result type.
pub type Result<T> = std::result::Result<T, Error>;
