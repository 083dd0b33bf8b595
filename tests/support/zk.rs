//! Sessions and raw clients on the test binary's shared ZooKeeper server.

use std::time::Duration;

use zk_recipes::testing::{shared_server, FaultProxy, ZooKeeperServer};
use zk_recipes::{zk, LossPolicy, Session};

/// A session on the shared server (4 s session timeout).
pub async fn session() -> Session {
    Session::builder(shared_server().connect_string())
        .with_session_timeout(Duration::from_secs(4))
        .connect()
        .await
        .expect("connect to the shared test server")
}

/// A session behind a proxy of its own, so that faults injected for it disturb no other test.
pub async fn session_via_proxy(timeout: Duration, policy: LossPolicy) -> (Session, FaultProxy) {
    let proxy = FaultProxy::start(shared_server().addr()).expect("proxy");
    let s = Session::builder(proxy.addr().to_string())
        .with_session_timeout(timeout)
        .with_loss_policy(policy)
        .connect()
        .await
        .expect("connect through the proxy");
    (s, proxy)
}

/// A plain `zookeeper-client` on the shared server: the administrator's view.
pub async fn raw() -> zk::Client {
    zk::Client::connect(&shared_server().connect_string())
        .await
        .expect("raw connect")
}

/// A plain `zookeeper-client` on the shared server authenticated as the super user
/// ([`zk_recipes::testing::SUPER_AUTH`]): an administrator who passes every ACL.
pub async fn admin() -> zk::Client {
    zk::Client::connector()
        .with_auth("digest", zk_recipes::testing::SUPER_AUTH.as_bytes())
        .connect(&shared_server().connect_string())
        .await
        .expect("connect as the administrator")
}

/// The children of `path` on the shared server (none if it does not exist).
pub async fn children(path: &str) -> Vec<String> {
    children_on(shared_server(), path).await
}

/// Waits until `path` has at least `n` children, panicking with `what` after 5 s.
pub async fn wait_for_children(path: &str, n: usize, what: &str) {
    let by = std::time::Instant::now() + Duration::from_secs(5);
    while children(path).await.len() < n {
        assert!(std::time::Instant::now() < by, "{what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The children of `path` on `server` (none if it does not exist).
pub async fn children_on(server: &ZooKeeperServer, path: &str) -> Vec<String> {
    let raw = zk::Client::connect(&server.connect_string())
        .await
        .expect("raw connect");
    match raw.list_children(path).await {
        Ok(c) => c,
        Err(zk::Error::NoNode) => Vec::new(),
        Err(e) => panic!("list {path}: {e}"),
    }
}

/// The requests `s`'s recipes send in the next `d` ([`Session::request_count`]).
pub async fn requests_in(s: &Session, d: Duration) -> u64 {
    let before = s.request_count();
    tokio::time::sleep(d).await;
    s.request_count() - before
}

/// The requests `proxy` forwards in the next `d` (its session's, the client's own among them).
pub async fn forwarded_in(proxy: &FaultProxy, d: Duration) -> u64 {
    let before = proxy.requests_forwarded();
    tokio::time::sleep(d).await;
    proxy.requests_forwarded() - before
}
