//! Real Apache ZooKeeper servers for tests, in the spirit of Curator's `TestingServer` and
//! `TestingCluster`. Compiled with the `testing` feature.
//!
//! Every server is a real ZooKeeper JVM (`ZooKeeperServerMain` for a [`ZooKeeperServer`],
//! `QuorumPeerMain` for each member of a [`ZooKeeperCluster`]), never a mock. Each server has
//! a [`FaultProxy`] in front of it, so a test can partition a client from the server (see
//! [`ZooKeeperServer::connect_string_via_proxy`]) and force a session to expire
//! ([`expire_session`]).
//!
//! # Requirements
//!
//! Java and the ZooKeeper jars: on Debian/Ubuntu
//! `apt-get install -y zookeeper default-jre-headless`. The classpath defaults to
//! `/usr/share/java/zookeeper.jar` (whose manifest pulls in its dependencies) plus
//! `slf4j-simple.jar`; set `ZOOKEEPER_CLASSPATH` to override it. Java is `$JAVA_HOME/bin/java`
//! or `java` from `PATH`. When they are missing, starting a server fails with
//! [`Error::Harness`] and [`shared_server`] panics: ZooKeeper tests fail, they never skip.
//!
//! # Process lifetime
//!
//! Each JVM runs in its own process group and is killed when its handle drops. It is also
//! killed by the kernel when the test process dies (`PR_SET_PDEATHSIG`), even by a signal:
//! the JVMs are forked from one long-lived spawner thread, because the death signal fires
//! when the *thread* that forked exits and libtest runs each test on a short-lived thread.
//! Server logs (`zookeeper.log`), configuration (`zoo.cfg`) and data live in the server's
//! data directory, a temporary directory unless [`ServerOptions::data_dir`] is given.
//!
//! # Timing
//!
//! Servers use `tickTime=500`, so session timeouts from 1 s to 10 s are accepted. A
//! standalone server answers `ruok` about a second after it is spawned; a three-member
//! ensemble elects its leader a second or two after that.

mod cluster;
mod error;
mod jvm;
mod options;
mod proxy;
mod server;

use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use tempfile::TempDir;
use zookeeper_client as zk;

#[allow(unused_imports)]
use self::cluster::MemberStatus;
pub use self::cluster::ZooKeeperCluster;
pub use self::error::{Error, Result};
#[allow(unused_imports)]
use self::jvm::*;
pub use self::options::ServerOptions;
pub use self::proxy::{Fault, FaultAction, FaultPoint, FaultProxy, FaultStatus, Op};
pub use self::server::ZooKeeperServer;
/// The data a release of ours writes on a contender node in the transaction that deletes it:
/// the mark that hands the lock to the waiter behind (for raw clients that mimic our release).
pub use crate::queue::RELEASE_MARK;

const INSTALL_HINT: &str = "install it with: apt-get install -y zookeeper default-jre-headless";
const DEFAULT_ZOOKEEPER_JAR: &str = "/usr/share/java/zookeeper.jar";
const LOGGER_JARS: [&str; 2] = [
    "/usr/share/java/slf4j-simple.jar",
    "/usr/share/java/slf4j-nop.jar",
];
const NETTY_CODEC_JAR: &str = "/usr/share/java/netty-codec.jar";
const STANDALONE_MAIN: &str = "org.apache.zookeeper.server.ZooKeeperServerMain";
const QUORUM_MAIN: &str = "org.apache.zookeeper.server.quorum.QuorumPeerMain";
const LOG_FILE: &str = "zookeeper.log";
const CONFIG_FILE: &str = "zoo.cfg";

/// How long a standalone server (or each member) may take to answer `ruok`.
const READY_TIMEOUT: Duration = Duration::from_secs(30);
/// How long an ensemble may take to elect a leader and have every live member serve.
const QUORUM_TIMEOUT: Duration = Duration::from_secs(60);
/// How long `stop` waits after SIGTERM before it sends SIGKILL.
const STOP_TIMEOUT: Duration = Duration::from_secs(10);
/// Timeout of each connect/read/write of [`ZooKeeperServer::four_letter`].
const FOUR_LETTER_TIMEOUT: Duration = Duration::from_secs(5);
/// Timeout of the four-letter words used while polling for readiness.
const POLL_TIMEOUT: Duration = Duration::from_secs(1);
const POLL_INTERVAL: Duration = Duration::from_millis(50);
/// How many fresh ports a start tries when the chosen port turns out to be taken.
const PORT_ATTEMPTS: usize = 3;
const LOG_TAIL_LINES: usize = 40;
/// Marks a readiness failure caused by another process answering on the server's port.
const ANOTHER_PROCESS: &str = "another process answers on this port";

/// The `digest` credentials (`user:password`) of the administrator (`super`) of every server
/// the harness starts, for tests that act as an operator who overrides ACLs. Test servers
/// only: a known super password has no place on a real server.
pub const SUPER_AUTH: &str = "super:zk-recipes-test";

static SHARED: OnceLock<std::result::Result<ZooKeeperServer, String>> = OnceLock::new();

/// A standalone server shared by all tests of one test binary, started on first use.
///
/// It is never dropped: its JVM is killed when the test process exits (or dies), and its
/// temporary directory is removed at normal exit. Tests sharing it should work under their
/// own [`unique_root`], and block their own [`FaultProxy`] rather than the server's.
///
/// # Panics
///
/// If the server cannot start, for example because Java or ZooKeeper is not installed
/// (`apt-get install -y zookeeper default-jre-headless`). Every later call panics with the
/// same message: ZooKeeper tests fail, they never skip.
pub fn shared_server() -> &'static ZooKeeperServer {
    let started = SHARED.get_or_init(|| {
        let server = ZooKeeperServer::start().map_err(|e| e.to_string())?;
        // SAFETY: registering a plain extern "C" function has no preconditions.
        unsafe { libc::atexit(kill_shared_server_at_exit) };
        Ok(server)
    });
    match started {
        Ok(server) => server,
        Err(e) => panic!(
            "the shared ZooKeeper test server could not start: {e}\n\
             These tests need a real ZooKeeper; on Debian/Ubuntu: apt-get install -y zookeeper default-jre-headless"
        ),
    }
}

extern "C" fn kill_shared_server_at_exit() {
    if let Some(Ok(server)) = SHARED.get() {
        server.kill_at_exit();
    }
}

/// Forces the session `info` to end, as a server-side expiry would: its ephemeral nodes vanish
/// and the client that owns it (connected through `proxies`) sees `SessionState::Expired`
/// once it reconnects.
///
/// It blocks `proxies`, so that the client under test cannot steal the session back, resumes
/// the session with a second client connected straight to `direct_connect` (a connect string
/// that bypasses the proxies), drops that client, which sends `CloseSession`, checks that the
/// session is gone (resuming it fails with `SessionExpired`), and then unblocks the proxies
/// (those that were blocked before the call stay blocked). The client under test reports
/// `Expired` about half a second after the proxies open.
///
/// # Cancel safety
///
/// Not cancel safe: if the future is dropped midway the proxies stay blocked.
///
/// # Errors
///
/// * [`Error::Harness`] if the session cannot be resumed and closed within a few attempts
///   (each bounded by a timeout). The proxies are unblocked anyway.
pub async fn expire_session(
    proxies: &[&FaultProxy],
    direct_connect: &str,
    info: zk::SessionInfo,
) -> Result<()> {
    let was_blocked: Vec<bool> = proxies.iter().map(|p| p.is_blocked()).collect();
    for proxy in proxies {
        proxy.set_blocked(true);
    }
    let result = close_session(direct_connect, info).await;
    for (proxy, was_blocked) in proxies.iter().zip(was_blocked) {
        if !was_blocked {
            proxy.set_blocked(false);
        }
    }
    result
}

async fn close_session(direct_connect: &str, info: zk::SessionInfo) -> Result<()> {
    const ATTEMPTS: usize = 10;
    const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
    let mut last = String::new();
    for attempt in 1..=ATTEMPTS {
        let connect = zk::Client::connector()
            .with_session(info.clone())
            .with_fail_eagerly()
            .connect(direct_connect);
        match tokio::time::timeout(CONNECT_TIMEOUT, connect).await {
            // The server no longer knows the session: done.
            Ok(Err(zk::Error::SessionExpired)) => return Ok(()),
            // We own the session now; dropping the last clone sends CloseSession. Loop to
            // check that the server has processed it.
            Ok(Ok(client)) => {
                drop(client);
                last = "resumed and closed".into();
                continue;
            }
            Ok(Err(e)) => last = format!("connect failed: {e}"),
            Err(_) => last = format!("connect timed out after {CONNECT_TIMEOUT:?}"),
        }
        if attempt < ATTEMPTS {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    Err(Error::Harness(format!(
        "could not expire session {} via {direct_connect} in {ATTEMPTS} attempts (last: {last})",
        info.id()
    )))
}

/// A fresh root path `"/t-<prefix>-<uuid>"` for isolating a test's nodes.
pub fn unique_root(prefix: &str) -> String {
    format!("/t-{prefix}-{}", uuid::Uuid::new_v4().simple())
}

/// Runs this process as if the thread that bounds how long a dropped guard's release stays
/// parked could not be started (see the README's Guards section), to test what a release
/// then does. Call it before any guard of the process is dropped; `false` if one was, and the
/// thread runs already. Process-wide: a test binary of its own.
///
/// ```no_run
/// assert!(zk_recipes::testing::without_deadline_thread());
/// ```
pub fn without_deadline_thread() -> bool {
    crate::parking::without_deadline_thread()
}

/// `CLOCK_MONOTONIC` in nanoseconds: the clock of Java's `System.nanoTime` and Python's
/// `time.monotonic_ns`, so event histories recorded by several processes on one machine can
/// be merged and compared.
pub fn monotonic_nanos() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_MONOTONIC) failed");
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_mntr() {
        let map = parse_mntr(
            "zk_version\t3.8.0-abc, built on x\nzk_watch_count\t3\nzk_server_state\tleader\n",
        );
        assert_eq!(map["zk_watch_count"], "3");
        assert_eq!(map["zk_server_state"], "leader");
        assert_eq!(map["zk_version"], "3.8.0-abc, built on x");
        assert!(
            parse_mntr("This ZooKeeper instance is not currently serving requests\n").is_empty()
        );
    }

    #[test]
    fn parses_srvr_mode() {
        let srvr = "Zookeeper version: 3.8.0\nLatency min/avg/max: 0/0.0/0\nMode: follower\nNode count: 5\n";
        assert_eq!(parse_mode(srvr).as_deref(), Some("follower"));
        assert_eq!(
            parse_mode("This ZooKeeper instance is not currently serving requests\n"),
            None
        );
    }

    #[test]
    fn unique_roots_differ() {
        let a = unique_root("x");
        assert!(
            a.starts_with("/t-x-") && a.len() == "/t-x-".len() + 32,
            "{a}"
        );
        assert_ne!(a, unique_root("x"));
    }

    #[test]
    fn monotonic_nanos_is_monotonic() {
        let a = monotonic_nanos();
        let b = monotonic_nanos();
        assert!(b >= a);
    }

    #[test]
    fn options_builder() {
        let opts = ServerOptions::new()
            .with_tick_time(Duration::from_millis(200))
            .with_port(1234)
            .with_config_line("a=b")
            .with_system_property("k", "v")
            .with_java_defaults();
        assert!(opts.java_defaults);
        assert!(!ServerOptions::new().java_defaults);
        assert_eq!(opts.tick_time, Duration::from_millis(200));
        assert_eq!(opts.port, Some(1234));
        assert_eq!(opts.extra_config, vec!["a=b".to_string()]);
        assert_eq!(
            opts.system_properties,
            vec![("k".to_string(), "v".to_string())]
        );
        assert_eq!(ServerOptions::default(), ServerOptions::new());
    }
}

mod expire;
mod playground;
pub use playground::Playground;

/// The id of a `digest` ACL entry, `user:base64(sha1(user:password))`, made as each session's
/// own identity is: for raw clients that mimic our contender ACL (the bench's replica chain).
///
/// ```
/// assert_eq!(
///     zk_recipes::testing::digest_acl_id("bench", "pw"),
///     "bench:j5t6H2hjkmjTwc3irGBHecw4ka8="
/// );
/// ```
pub fn digest_acl_id(user: &str, password: &str) -> String {
    crate::session::digest_acl_id(user, password)
}
