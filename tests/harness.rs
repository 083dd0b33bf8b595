//! Tests of the real-ZooKeeper test harness (`zk_recipes::testing`): servers, the fault
//! proxy, forced session expiry, process control and a three-member ensemble.
//!
//! Every wait is bounded; failure messages say what was expected and what was seen.

use std::future::Future;
use std::time::{Duration, Instant};

use zk_recipes::testing::{
    expire_session, monotonic_nanos, shared_server, unique_root, Fault, FaultAction, FaultPoint,
    FaultProxy, FaultStatus, Op, ServerOptions, ZooKeeperCluster, ZooKeeperServer,
};
use zookeeper_client as zk;

static OPEN: &zk::CreateOptions<'static> =
    &zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
static EPHEMERAL: &zk::CreateOptions<'static> =
    &zk::CreateMode::Ephemeral.with_acls(zk::Acls::anyone_all());

/// Awaits `fut` for at most `within`, panicking with `what` otherwise.
async fn bounded<T>(within: Duration, what: &str, fut: impl Future<Output = T>) -> T {
    match tokio::time::timeout(within, fut).await {
        Ok(value) => value,
        Err(_) => panic!("timed out after {within:?} waiting for {what}"),
    }
}

/// Runs blocking harness calls off the test's runtime thread, so that client tasks keep running.
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    tokio::task::spawn_blocking(f)
        .await
        .expect("blocking harness call panicked")
}

async fn connect(connect_string: &str, session_timeout: Duration) -> zk::Client {
    bounded(
        Duration::from_secs(10),
        &format!("a session with {connect_string}"),
        async {
            zk::Client::connector()
                .with_session_timeout(session_timeout)
                .connect(connect_string)
                .await
                .unwrap_or_else(|e| panic!("connect to {connect_string}: {e}"))
        },
    )
    .await
}

/// Waits until `client` reports `want`, panicking with the last state seen otherwise.
async fn wait_for_state(client: &zk::Client, want: zk::SessionState, within: Duration) {
    let mut watcher = client.state_watcher();
    let mut seen = watcher.state();
    let reached = tokio::time::timeout(within, async {
        while seen != want && !seen.is_terminated() {
            seen = watcher.changed().await;
        }
    })
    .await;
    assert!(
        reached.is_ok() && seen == want,
        "expected session state {want:?} within {within:?}, still {:?}",
        client.state()
    );
}

async fn create(client: &zk::Client, path: &str, data: &[u8], options: &zk::CreateOptions<'_>) {
    bounded(
        Duration::from_secs(10),
        &format!("create {path}"),
        client.create(path, data, options),
    )
    .await
    .unwrap_or_else(|e| panic!("create {path}: {e}"));
}

async fn get_data(client: &zk::Client, path: &str) -> Vec<u8> {
    bounded(
        Duration::from_secs(10),
        &format!("get_data {path}"),
        client.get_data(path),
    )
    .await
    .unwrap_or_else(|e| panic!("get_data {path}: {e}"))
    .0
}

async fn exists(client: &zk::Client, path: &str) -> bool {
    bounded(
        Duration::from_secs(10),
        &format!("check_stat {path}"),
        client.check_stat(path),
    )
    .await
    .unwrap_or_else(|e| panic!("check_stat {path}: {e}"))
    .is_some()
}

/// True once `pid` is gone or a zombie.
fn process_is_dead(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        // "pid (comm) S ...": the state follows the last ')'.
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with(['Z', 'X'])),
    }
}

#[tokio::test]
async fn server_serves_clients_directly_and_via_proxy() {
    // Given the shared server
    let server = shared_server();
    assert_eq!(
        server.connect_string(),
        format!("127.0.0.1:{}", server.port())
    );
    assert_eq!(server.four_letter("ruok").unwrap(), "imok");
    assert!(server.pid().is_some());

    // When one client writes directly and another reads through the proxy
    let root = unique_root("serve");
    let direct = connect(&server.connect_string(), Duration::from_secs(4)).await;
    let proxied = connect(&server.connect_string_via_proxy(), Duration::from_secs(4)).await;
    create(&direct, &root, b"hello", OPEN).await;

    // Then both see the node
    assert_eq!(get_data(&proxied, &root).await, b"hello");
    let child = format!("{root}/via-proxy");
    create(&proxied, &child, b"world", OPEN).await;
    assert_eq!(get_data(&direct, &child).await, b"world");
    assert!(server.proxy().connection_count() >= 1);
}

/// A fault made `only` for transactions lets every other request through and strikes the first
/// transaction after it was armed: the reads before it are answered, the `multi` never reaches
/// the server (its node is not there once the client is back).
#[tokio::test]
async fn a_fault_for_one_kind_of_request_lets_the_others_through() {
    let root = unique_root("fault-only");
    let direct = connect(&shared_server().connect_string(), Duration::from_secs(4)).await;
    create(&direct, &root, b"", OPEN).await;
    let proxy = FaultProxy::start(shared_server().addr()).expect("proxy");
    let client = connect(&proxy.addr().to_string(), Duration::from_secs(4)).await;
    proxy.arm(
        Fault::new(
            FaultPoint::BeforeRequest(1),
            FaultAction::Cut {
                refuse_for: Duration::ZERO,
            },
        )
        .only(Op::Multi),
    );
    // Two reads and a plain create go through, uncounted.
    assert!(exists(&client, &root).await);
    assert_eq!(get_data(&client, &root).await, b"");
    create(&client, &format!("{root}/plain"), b"", OPEN).await;
    assert!(
        matches!(proxy.fault_status(), FaultStatus::Armed { seen: 0, .. }),
        "the fault counted a request other than a transaction: {:?}",
        proxy.fault_status()
    );
    let node = format!("{root}/in-multi");
    let mut multi = client.new_multi_writer();
    multi.add_create(&node, b"", OPEN).unwrap();
    let result = bounded(
        Duration::from_secs(10),
        "the cut transaction",
        multi.commit(),
    )
    .await;
    assert!(result.is_err(), "the transaction was answered: {result:?}");
    assert!(
        matches!(proxy.fault_status(), FaultStatus::Fired { .. }),
        "the fault did not strike the transaction: {:?}",
        proxy.fault_status()
    );
    assert!(
        !exists(&direct, &node).await,
        "the cut transaction reached the server"
    );
}

#[tokio::test]
async fn blocking_the_proxy_disconnects_and_unblocking_reconnects() {
    // Given a client connected through its own proxy to the shared server
    let server = shared_server();
    let proxy = FaultProxy::start(server.addr()).unwrap();
    let client = connect(&proxy.addr().to_string(), Duration::from_secs(4)).await;
    let session = client.session_id();
    let root = unique_root("block");
    create(&client, &root, b"", EPHEMERAL).await;

    // When the proxy is blocked
    proxy.set_blocked(true);
    assert!(proxy.is_blocked());

    // Then the client goes Disconnected at once, and new connections are refused
    wait_for_state(
        &client,
        zk::SessionState::Disconnected,
        Duration::from_secs(2),
    )
    .await;
    assert_eq!(proxy.connection_count(), 0);

    // When it is unblocked before the session times out
    proxy.set_blocked(false);

    // Then the client reconnects to the same session and its ephemeral survived
    wait_for_state(
        &client,
        zk::SessionState::SyncConnected,
        Duration::from_secs(5),
    )
    .await;
    assert_eq!(client.session_id(), session);
    assert!(exists(&client, &root).await);

    // And a one-off drop_connections is survived the same way
    proxy.drop_connections();
    assert!(!proxy.is_blocked());
    // A request racing with the drop fails with a connection loss; retry until reconnected.
    let found = bounded(
        Duration::from_secs(10),
        "a request after drop_connections",
        async {
            loop {
                match client.check_stat(&root).await {
                    Ok(stat) => break stat.is_some(),
                    Err(zk::Error::ConnectionLoss | zk::Error::Custom(_)) => {
                        tokio::time::sleep(Duration::from_millis(20)).await
                    }
                    Err(e) => panic!("check_stat {root} after drop_connections: {e}"),
                }
            }
        },
    )
    .await;
    assert!(found, "ephemeral lost after drop_connections");
    assert_eq!(client.session_id(), session);
}

#[tokio::test]
async fn expire_session_expires_the_client_and_deletes_its_ephemerals() {
    // Given a client connected via a proxy that owns an ephemeral node
    let server = shared_server();
    let proxy = FaultProxy::start(server.addr()).unwrap();
    let client = connect(&proxy.addr().to_string(), Duration::from_secs(4)).await;
    let observer = connect(&server.connect_string(), Duration::from_secs(4)).await;
    let path = unique_root("expire");
    create(&client, &path, b"mine", EPHEMERAL).await;
    let mut states = client.state_watcher();

    // When its session is expired
    let started = Instant::now();
    bounded(
        Duration::from_secs(30),
        "expire_session",
        expire_session(
            &[&proxy],
            &server.connect_string(),
            client.session().clone(),
        ),
    )
    .await
    .unwrap();
    assert!(!proxy.is_blocked(), "expire_session must unblock the proxy");

    // Then the ephemeral is gone at once, and the client observes Expired
    assert!(
        !exists(&observer, &path).await,
        "ephemeral {path} survived expire_session"
    );
    let mut seen = Vec::new();
    bounded(
        Duration::from_secs(10),
        "the client to observe Expired",
        async {
            loop {
                let state = states.changed().await;
                seen.push(state);
                if state.is_terminated() {
                    break;
                }
            }
        },
    )
    .await;
    assert_eq!(
        seen.last(),
        Some(&zk::SessionState::Expired),
        "states seen: {seen:?}"
    );
    assert_eq!(
        client.get_data("/").await.unwrap_err(),
        zk::Error::SessionExpired
    );
    eprintln!(
        "expire_session: Expired observed {:?} after the call started",
        started.elapsed()
    );
}

#[tokio::test]
async fn pause_freezes_the_server_and_resume_thaws_it() {
    // Given a private server and a client with a 6 s session (lost after 2.4 s of silence,
    // expired by the client itself after 8.4 s)
    let server = blocking(ZooKeeperServer::start).await.unwrap();
    let client = connect(&server.connect_string(), Duration::from_secs(6)).await;
    let session = client.session_id();
    let root = unique_root("pause");
    create(&client, &root, b"", EPHEMERAL).await;

    // When the JVM is paused
    server.pause().unwrap();
    assert!(server.is_paused());

    // Then four-letter words time out and the client loses the connection
    let server = blocking(move || {
        let reply = server.four_letter_timeout("ruok", Duration::from_secs(1));
        assert!(reply.is_err(), "a paused server answered ruok: {reply:?}");
        server
    })
    .await;
    wait_for_state(
        &client,
        zk::SessionState::Disconnected,
        Duration::from_secs(5),
    )
    .await;

    // When it is resumed
    server.resume().unwrap();
    assert!(!server.is_paused());

    // Then it answers again and the client gets its session back
    // (`_server` keeps the server alive to the end of the test.)
    let (_server, ruok) = blocking(move || {
        let ruok = server.four_letter("ruok");
        (server, ruok)
    })
    .await;
    assert_eq!(ruok.unwrap(), "imok");
    wait_for_state(
        &client,
        zk::SessionState::SyncConnected,
        Duration::from_secs(5),
    )
    .await;
    assert_eq!(client.session_id(), session);
    assert!(exists(&client, &root).await);
}

#[tokio::test]
async fn kill_and_restart_keep_the_data_and_drop_kills_the_jvm() {
    // Given a private server holding a node
    let mut server = blocking(ZooKeeperServer::start).await.unwrap();
    let port = server.port();
    let root = unique_root("restart");
    {
        let client = connect(&server.connect_string(), Duration::from_secs(4)).await;
        create(&client, &root, b"durable", OPEN).await;
    }

    // When it is killed
    let pid = server.pid().expect("a running server has a pid");
    server.kill().unwrap();

    // Then the JVM is gone and nothing answers
    assert_eq!(server.pid(), None);
    assert!(process_is_dead(pid), "JVM {pid} still alive after kill()");
    assert!(server.four_letter("ruok").is_err());

    // When it is restarted
    let server = blocking(move || server.restart().map(|()| server))
        .await
        .unwrap();

    // Then it serves the same data on the same port
    assert_eq!(server.port(), port);
    let client = connect(&server.connect_string(), Duration::from_secs(4)).await;
    assert_eq!(get_data(&client, &root).await, b"durable");
    drop(client);

    // And a graceful stop + restart keeps it too
    let server = blocking(move || {
        let mut server = server;
        server.stop().unwrap();
        assert_eq!(server.pid(), None);
        server.restart().unwrap();
        server
    })
    .await;
    let client = connect(&server.connect_string(), Duration::from_secs(4)).await;
    assert_eq!(get_data(&client, &root).await, b"durable");
    drop(client);

    // When the handle drops, the JVM dies
    let pid = server.pid().unwrap();
    let data_dir = server.data_dir().to_path_buf();
    drop(server);
    assert!(process_is_dead(pid), "JVM {pid} still alive after drop");
    assert!(
        !data_dir.exists(),
        "temporary data dir {} not removed",
        data_dir.display()
    );
}

#[tokio::test]
async fn mntr_reports_watch_counts() {
    // Given a data watch set by a client of the shared server
    let server = shared_server();
    let client = connect(&server.connect_string(), Duration::from_secs(4)).await;
    let root = unique_root("mntr");
    create(&client, &root, b"", OPEN).await;
    let (_, _, watcher) = bounded(
        Duration::from_secs(10),
        "get_and_watch_data",
        client.get_and_watch_data(&root),
    )
    .await
    .unwrap();

    // Then mntr parses, counts at least our watch, and wchp lists our path
    let mntr = blocking(|| shared_server().mntr()).await.unwrap();
    assert_eq!(
        mntr.get("zk_server_state").map(String::as_str),
        Some("standalone"),
        "{mntr:?}"
    );
    let watches: u64 = mntr["zk_watch_count"]
        .parse()
        .expect("zk_watch_count is a number");
    assert!(
        watches >= 1,
        "zk_watch_count = {watches} while a watch is set"
    );
    let wchp = blocking(|| shared_server().wchp()).await.unwrap();
    assert!(wchp.contains(&root), "wchp does not list {root}:\n{wchp}");
    let cons = blocking(|| shared_server().cons()).await.unwrap();
    assert!(cons.contains("127.0.0.1"), "cons:\n{cons}");
    assert!(blocking(|| shared_server().four_letter("nope"))
        .await
        .is_err());
    drop(watcher);
}

#[tokio::test]
async fn cluster_elects_a_new_leader_when_the_leader_dies() {
    // Given a three-member ensemble
    let started = Instant::now();
    let cluster = blocking(|| ZooKeeperCluster::start(3)).await.unwrap();
    eprintln!("3-member cluster ready in {:?}", started.elapsed());
    assert_eq!(cluster.members().len(), 3);
    assert_eq!(cluster.connect_string().split(',').count(), 3);
    assert_eq!(cluster.connect_string_via_proxy().split(',').count(), 3);
    let old_leader = cluster.leader().expect("a started cluster has a leader");
    for (i, member) in cluster.members().iter().enumerate() {
        let mode = member.mode().unwrap();
        assert_eq!(
            mode,
            if i == old_leader {
                "leader"
            } else {
                "follower"
            }
        );
    }
    let root = unique_root("cluster");
    let client = connect(&cluster.connect_string_via_proxy(), Duration::from_secs(4)).await;
    create(&client, &root, b"replicated", OPEN).await;
    drop(client);

    // When the leader is killed
    let mut cluster = cluster;
    cluster.member_mut(old_leader).kill().unwrap();
    let killed = Instant::now();
    let cluster = blocking(move || {
        cluster
            .wait_for_quorum(Duration::from_secs(30))
            .map(|()| cluster)
    })
    .await
    .unwrap();
    eprintln!(
        "new leader elected {:?} after the old one was killed",
        killed.elapsed()
    );

    // Then another member leads, and a client via connect_string() still reads and writes
    let new_leader = cluster.leader().expect("a new leader");
    assert_ne!(new_leader, old_leader);
    let client = connect(&cluster.connect_string(), Duration::from_secs(4)).await;
    assert_eq!(get_data(&client, &root).await, b"replicated");
    let child = format!("{root}/after-failover");
    create(&client, &child, b"", OPEN).await;
}

/// Child mode of `jvm_dies_with_the_test_process`: start a server, print its pid, and exit
/// without dropping anything.
const CHILD_ENV: &str = "ZK_RECIPES_HARNESS_CHILD";

#[test]
fn jvm_dies_with_the_test_process() {
    if let Some(dir) = std::env::var_os(CHILD_ENV) {
        // The parent owns (and removes) the data directory.
        let server = ZooKeeperServer::start_with(ServerOptions::new().with_data_dir(dir)).unwrap();
        println!("JVM_PID={}", server.pid().unwrap());
        std::process::exit(0); // no destructors run
    }
    // Given a test process that started a server and exited without dropping it
    let dir = tempfile::tempdir().unwrap();
    let output = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "jvm_dies_with_the_test_process",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, dir.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let pid: u32 = stdout
        .lines()
        .find_map(|line| line.split_once("JVM_PID=").map(|(_, pid)| pid))
        .unwrap_or_else(|| {
            panic!(
                "child printed no JVM_PID; stdout:\n{stdout}\nstderr:\n{}",
                String::from_utf8_lossy(&output.stderr)
            )
        })
        .trim()
        .parse()
        .unwrap();

    // Then the kernel killed the JVM (PR_SET_PDEATHSIG)
    let deadline = Instant::now() + Duration::from_secs(10);
    while !process_is_dead(pid) {
        assert!(
            Instant::now() < deadline,
            "JVM {pid} outlived its test process by 10s"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn monotonic_nanos_matches_the_std_monotonic_clock() {
    let before = monotonic_nanos();
    std::thread::sleep(Duration::from_millis(20));
    let elapsed = monotonic_nanos() - before;
    assert!(
        (20_000_000..2_000_000_000).contains(&elapsed),
        "elapsed {elapsed} ns"
    );
}
