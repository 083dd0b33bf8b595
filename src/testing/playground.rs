//! A ZooKeeper to try things on: `$ZK_CONNECT` when set, else a private server.

use std::net::{SocketAddr, ToSocketAddrs};

use super::{Error, Result};
use crate::session::Session;

use super::{expire_session, FaultProxy, ZooKeeperServer};

/// The ZooKeeper the examples and the demo run against.
///
/// With `ZK_CONNECT` unset it starts a private server through the harness (stopped when the
/// playground drops). Either way a [`FaultProxy`] stands in front of it, so that
/// [`expire`](Self::expire) can force a session's expiry, as the demo shows.
///
/// # Examples
///
/// ```no_run
/// # async fn f() -> Result<(), Box<dyn std::error::Error>> {
/// use zk_recipes::{testing::Playground, Session};
///
/// let zk = Playground::from_env()?;
/// println!("ZooKeeper: {}", zk.describe());
/// let session = Session::builder(zk.connect_string()).connect().await?;
/// zk.expire(&session).await?; // the session manager reconnects in a new epoch
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct Playground {
    server: Option<ZooKeeperServer>,
    proxy: FaultProxy,
    direct: String,
}

impl Playground {
    /// Uses `$ZK_CONNECT` (its first host; a chroot suffix is ignored) or starts a private
    /// server.
    ///
    /// # Errors
    ///
    /// [`Error::Harness`] if the private server cannot start (Java or the ZooKeeper package is
    /// missing: the message names the install command), [`Error::InvalidArgument`] if
    /// `ZK_CONNECT` does not resolve.
    pub fn from_env() -> Result<Playground> {
        match std::env::var("ZK_CONNECT")
            .ok()
            .filter(|s| !s.trim().is_empty())
        {
            Some(hosts) => {
                let first = hosts.split(',').next().unwrap_or_default();
                let first = first.split('/').next().unwrap_or_default().to_string();
                let addr: SocketAddr = first
                    .to_socket_addrs()
                    .ok()
                    .and_then(|mut a| a.next())
                    .ok_or_else(|| {
                        Error::InvalidArgument(format!(
                            "ZK_CONNECT={hosts:?}: cannot resolve {first:?}"
                        ))
                    })?;
                Ok(Playground {
                    server: None,
                    proxy: FaultProxy::start(addr)?,
                    direct: first,
                })
            }
            None => {
                let server = ZooKeeperServer::start()?;
                let proxy = FaultProxy::start(server.addr())?;
                Ok(Playground {
                    direct: server.connect_string(),
                    server: Some(server),
                    proxy,
                })
            }
        }
    }

    /// The connect string to give sessions (through the proxy).
    pub fn connect_string(&self) -> String {
        self.proxy.addr().to_string()
    }

    /// Where ZooKeeper is, for printing.
    pub fn describe(&self) -> String {
        match &self.server {
            Some(s) => format!(
                "private ZooKeeper at {} (pid {})",
                s.connect_string(),
                s.pid().unwrap_or(0)
            ),
            None => format!("ZK_CONNECT server {}", self.direct),
        }
    }

    /// Forces `session`'s current ZooKeeper session to expire.
    ///
    /// # Errors
    ///
    /// [`Error::Harness`] if the session is not connected or could not be expired.
    pub async fn expire(&self, session: &Session) -> Result<()> {
        let info = session
            .zk_session_info()
            .ok_or_else(|| Error::Harness("the session is not connected".into()))?;
        expire_session(&[&self.proxy], &self.direct, info).await
    }
}
