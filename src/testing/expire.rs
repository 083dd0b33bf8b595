//! Forcing a [`Session`]'s expiry from a test.

use super::{Error, Result};
use crate::session::Session;

use super::{expire_session, ZooKeeperCluster, ZooKeeperServer};

fn info_of(session: &Session) -> Result<zookeeper_client::SessionInfo> {
    session
        .zk_session_info()
        .ok_or_else(|| Error::Harness("the session has no live ZooKeeper session to expire".into()))
}

impl ZooKeeperServer {
    /// Expires `session`'s current ZooKeeper session on the server. The session must be
    /// connected through [`connect_string_via_proxy`](Self::connect_string_via_proxy): the
    /// proxy is blocked while a second client resumes the session directly and closes it, then
    /// unblocked, so the session manager sees `Expired` (and builds a new session).
    ///
    /// # Errors
    ///
    /// [`Error::Harness`] if the session is not connected or could not be closed.
    pub async fn expire(&self, session: &Session) -> Result<()> {
        expire_session(&[self.proxy()], &self.connect_string(), info_of(session)?).await
    }
}

impl ZooKeeperCluster {
    /// Like [`ZooKeeperServer::expire`], for a session connected through
    /// [`connect_string_via_proxy`](Self::connect_string_via_proxy).
    ///
    /// # Errors
    ///
    /// [`Error::Harness`] if the session is not connected or could not be closed.
    pub async fn expire(&self, session: &Session) -> Result<()> {
        expire_session(&self.proxies(), &self.connect_string(), info_of(session)?).await
    }
}

impl super::FaultProxy {
    /// Expires `session`, which must be connected through this proxy (and only it): blocks the
    /// proxy, resumes the session directly at the proxy's target and closes it, unblocks.
    ///
    /// Give each test that injects faults its own proxy (`FaultProxy::start(server.addr())`),
    /// so that blocking it does not disturb other tests' sessions.
    ///
    /// # Errors
    ///
    /// [`Error::Harness`] if the session is not connected or could not be closed.
    pub async fn expire(&self, session: &Session) -> Result<()> {
        expire_session(&[self], &self.target().to_string(), info_of(session)?).await
    }
}
