//! An administrator's moves on directories' ACLs, for the tests of nodes the server will not
//! let us delete (`tests/refused_deletes.rs`, `tests/sweeper_*.rs`).

use std::time::Duration;

use zk_recipes::zk;

/// Awaits `fut`, failing the test if it takes more than 15 s.
pub async fn within<F: std::future::Future>(what: &str, fut: F) -> F::Output {
    tokio::time::timeout(Duration::from_secs(15), fut)
        .await
        .unwrap_or_else(|_| panic!("expected {what} within 15 s"))
}

/// `path`'s children; none when `path` does not exist.
pub async fn children(client: &zk::Client, path: &str) -> Vec<String> {
    match client.list_children(path).await {
        Ok(c) => c,
        Err(zk::Error::NoNode) => Vec::new(),
        Err(e) => panic!("list {path}: {e}"),
    }
}

/// Anyone may create, read and write; nobody may delete.
pub fn denying_delete() -> Vec<zk::Acl> {
    use zk::Permission as P;
    vec![zk::Acl::new(
        P::CREATE | P::READ | P::WRITE,
        zk::AuthId::anyone(),
    )]
}

/// A directory open to anyone.
pub async fn an_open_directory(admin: &zk::Client, path: &str) {
    admin
        .create(
            path,
            b"",
            &zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all()),
        )
        .await
        .unwrap();
}

/// A directory whose ACL lets anyone create, read and write, but not delete: our contender
/// nodes can be made in it, and not deleted.
pub async fn a_directory_denying_delete(admin: &zk::Client, path: &str) {
    admin
        .create(
            path,
            b"",
            &zk::CreateMode::Persistent.with_acls(zk::Acls::new(&denying_delete())),
        )
        .await
        .unwrap();
}

/// The administrator sets `dir`'s ACL to deny DELETE (taking it away, or, when it was denied
/// already, changing only the ACL's version).
pub async fn deny_delete(admin: &zk::Client, dir: &str) {
    admin.set_acl(dir, &denying_delete(), None).await.unwrap();
}

/// The administrator gives `dir` every permission back (DELETE among them), as a `NoAuth`
/// error advises.
pub async fn delete_given_back(admin: &zk::Client, dir: &str) {
    admin
        .set_acl(
            dir,
            &[zk::Acl::new(zk::Permission::ALL, zk::AuthId::anyone())],
            None,
        )
        .await
        .unwrap();
}

/// The administrator sets `dir`'s ACL to let anyone create and write, but neither read (list
/// its children) nor delete.
pub async fn deny_read_and_delete(admin: &zk::Client, dir: &str) {
    use zk::Permission as P;
    let acl = [zk::Acl::new(P::CREATE | P::WRITE, zk::AuthId::anyone())];
    admin.set_acl(dir, &acl, None).await.unwrap();
}

/// Someone else's node, `{dir}/{name}`, made and deleted twice a second by `admin` until the
/// task is aborted: a directory whose children others keep changing.
pub fn churn(admin: &zk::Client, dir: &str, name: &str) -> tokio::task::JoinHandle<()> {
    let (admin, path) = (admin.clone(), format!("{dir}/{name}"));
    tokio::spawn(async move {
        let ephemeral = zk::CreateMode::Ephemeral.with_acls(zk::Acls::anyone_all());
        loop {
            let _ = admin.create(&path, b"", &ephemeral).await;
            tokio::time::sleep(Duration::from_millis(250)).await;
            let _ = admin.delete(&path, None).await;
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    })
}
