//! Nodes of ours the server will not let us delete ("stuck"), made the way the refused-delete
//! and sweeper tests make them: a guard taken in a directory denying DELETE
//! ([`super::acl::a_directory_denying_delete`]) and released, the release refused (`NoAuth`),
//! our node staying, noted by the session (whose sweeper then starts).

use std::future::Future;
use std::time::Duration;

use super::acl::{a_directory_denying_delete, within};
use super::zk::{admin, session_via_proxy};
use zk_recipes::testing::{unique_root, FaultProxy};
use zk_recipes::{zk, Error, ExclusiveLock, FairLock, LossPolicy, Session};

/// Awaits `release`, which the server must refuse (`NoAuth`: our node stays, noted as
/// stuck); fails the test's setup (`setup: …`) if it answers anything else.
pub async fn refused(release: impl Future<Output = zk_recipes::Result<()>>) {
    let released = within("release", release).await;
    assert!(
        matches!(released, Err(Error::NoAuth { .. })),
        "setup: {released:?}"
    );
}

/// Takes a fair lock in `dir` (denying DELETE) and releases it: the release is refused, our
/// node stays, noted as stuck, and the sweeper starts. The lock's handle is given back.
pub async fn a_stuck_node(s: &Session, dir: &str) -> FairLock {
    let lock = FairLock::new(s, dir).unwrap();
    let g = within("lock", lock.lock()).await.unwrap();
    refused(g.release()).await;
    lock
}

/// Takes the simple lock at `path` (its directory denying DELETE) and releases it: the
/// release is refused, our node stays at `path`, noted as stuck, and the sweeper starts. The
/// lock's handle is given back.
pub async fn a_stuck_simple_lock_node(s: &Session, path: &str) -> ExclusiveLock {
    let lock = ExclusiveLock::new(s, path).unwrap();
    let g = within("lock", lock.lock()).await.unwrap();
    refused(g.release()).await;
    lock
}

/// The administrator, a fresh directory denying DELETE (named after `name`), and a session
/// behind a proxy of its own (`timeout`, [`LossPolicy::OnExpiry`]) to count its requests and
/// disturb it: the scene of a sweeper test, before anything of ours is stuck.
pub async fn a_session_and_a_directory_denying_delete(
    name: &str,
    timeout: Duration,
) -> (zk::Client, String, Session, FaultProxy) {
    let admin = admin().await;
    let dir = unique_root(name);
    a_directory_denying_delete(&admin, &dir).await;
    let (s, proxy) = session_via_proxy(timeout, LossPolicy::OnExpiry).await;
    (admin, dir, s, proxy)
}
