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

mod proxy;

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

pub use self::proxy::{Fault, FaultAction, FaultPoint, FaultProxy, FaultStatus};
use crate::{Error, Result};

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

// ---------------------------------------------------------------------------------------------
// Options
// ---------------------------------------------------------------------------------------------

/// How to start a standalone [`ZooKeeperServer`]; see [`ZooKeeperServer::start_with`].
///
/// # Examples
///
/// ```no_run
/// use std::time::Duration;
/// use zk_recipes::testing::{ServerOptions, ZooKeeperServer};
///
/// let server = ZooKeeperServer::start_with(
///     ServerOptions::new()
///         .with_tick_time(Duration::from_millis(200))
///         .with_system_property("zookeeper.extendedTypesEnabled", "true"),
/// )
/// .unwrap();
/// println!("ZooKeeper with TTL nodes at {}", server.connect_string());
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerOptions {
    /// `tickTime`. Default 500 ms: sessions from 2 to 20 ticks (1 s to 10 s) are accepted.
    pub tick_time: Duration,
    /// The client port. Default `None`: a free port of 127.0.0.1.
    pub port: Option<u16>,
    /// The data directory (holds `zoo.cfg`, `zookeeper.log` and the data). It is created if
    /// missing and kept afterwards. Default `None`: a temporary directory removed on drop.
    pub data_dir: Option<PathBuf>,
    /// Extra `zoo.cfg` lines, appended after the harness's own (a later key wins).
    pub extra_config: Vec<String>,
    /// Extra JVM system properties, passed as `-Dkey=value` after the harness's own.
    pub system_properties: Vec<(String, String)>,
}

impl Default for ServerOptions {
    fn default() -> Self {
        ServerOptions::new()
    }
}

impl ServerOptions {
    /// The defaults: tickTime 500 ms, a free port, a temporary data directory.
    pub const fn new() -> ServerOptions {
        ServerOptions {
            tick_time: Duration::from_millis(500),
            port: None,
            data_dir: None,
            extra_config: Vec::new(),
            system_properties: Vec::new(),
        }
    }

    /// Sets `tickTime` (default 500 ms; rounded down to whole milliseconds, at least 1).
    pub fn with_tick_time(mut self, tick_time: Duration) -> ServerOptions {
        self.tick_time = tick_time;
        self
    }

    /// Uses this client port instead of a free one (default: a free port).
    pub fn with_port(mut self, port: u16) -> ServerOptions {
        self.port = Some(port);
        self
    }

    /// Keeps data, config and log in this directory (default: a temporary directory).
    pub fn with_data_dir(mut self, dir: impl Into<PathBuf>) -> ServerOptions {
        self.data_dir = Some(dir.into());
        self
    }

    /// Appends a `zoo.cfg` line such as `"globalOutstandingLimit=10"` (default: none).
    pub fn with_config_line(mut self, line: impl Into<String>) -> ServerOptions {
        self.extra_config.push(line.into());
        self
    }

    /// Adds a JVM system property such as `zookeeper.extendedTypesEnabled=true` (default: none).
    pub fn with_system_property(
        mut self,
        key: impl Into<String>,
        value: impl Into<String>,
    ) -> ServerOptions {
        self.system_properties.push((key.into(), value.into()));
        self
    }
}

// ---------------------------------------------------------------------------------------------
// Launching JVMs
// ---------------------------------------------------------------------------------------------

/// Where Java and the ZooKeeper jars are.
#[derive(Debug, Clone)]
struct JavaEnv {
    java: PathBuf,
    classpath: String,
}

impl JavaEnv {
    fn detect() -> Result<JavaEnv> {
        let java = find_java().ok_or_else(|| {
            Error::Harness(format!(
                "Java was not found ($JAVA_HOME/bin/java or java in PATH); \
                 real ZooKeeper servers need a JRE and the ZooKeeper jars, {INSTALL_HINT}"
            ))
        })?;
        let classpath = match std::env::var("ZOOKEEPER_CLASSPATH") {
            Ok(cp) if !cp.trim().is_empty() => cp,
            _ => {
                if !Path::new(DEFAULT_ZOOKEEPER_JAR).is_file() {
                    return Err(Error::Harness(format!(
                        "{DEFAULT_ZOOKEEPER_JAR} is missing (and ZOOKEEPER_CLASSPATH is not set); \
                         real ZooKeeper servers need it, {INSTALL_HINT}"
                    )));
                }
                let mut cp = DEFAULT_ZOOKEEPER_JAR.to_string();
                if let Some(logger) = LOGGER_JARS.iter().find(|jar| Path::new(jar).is_file()) {
                    cp.push(':');
                    cp.push_str(logger);
                }
                // NettyServerCnxnFactory (TLS client ports) needs netty-codec, which the
                // manifest of Debian's zookeeper.jar does not list.
                if Path::new(NETTY_CODEC_JAR).is_file() {
                    cp.push(':');
                    cp.push_str(NETTY_CODEC_JAR);
                }
                cp
            }
        };
        Ok(JavaEnv { java, classpath })
    }
}

fn find_java() -> Option<PathBuf> {
    if let Some(home) = std::env::var_os("JAVA_HOME") {
        let java = Path::new(&home).join("bin/java");
        if java.is_file() {
            return Some(java);
        }
    }
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|dir| dir.join("java"))
        .find(|java| java.is_file())
}

/// Everything needed to (re)start one ZooKeeper JVM.
#[derive(Debug, Clone)]
struct Launch {
    env: JavaEnv,
    main_class: &'static str,
    name: String,
    port: u16,
    data_dir: PathBuf,
    system_properties: Vec<(String, String)>,
}

impl Launch {
    fn config_path(&self) -> PathBuf {
        self.data_dir.join(CONFIG_FILE)
    }

    fn log_path(&self) -> PathBuf {
        self.data_dir.join(LOG_FILE)
    }

    fn addr(&self) -> SocketAddr {
        SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, self.port))
    }

    fn args(&self) -> Vec<String> {
        let mut args: Vec<String> = [
            "-Xmx256m",
            "-XX:+UseSerialGC",
            "-XX:-UsePerfData",
            "-Djava.net.preferIPv4Stack=true",
            "-Dzookeeper.admin.enableServer=false",
            "-Dzookeeper.jmx.log4j.disable=true",
            // No fsync: a SIGKILLed JVM still leaves its writes in the page cache.
            "-Dzookeeper.forceSync=no",
            // Faster leader election when members start at slightly different times.
            "-Dzookeeper.fastleader.maxNotificationInterval=1000",
            "-Dzookeeper.cnxTimeout=2000",
            "-Dorg.slf4j.simpleLogger.defaultLogLevel=info",
            "-Dorg.slf4j.simpleLogger.showDateTime=true",
            "-Dorg.slf4j.simpleLogger.dateTimeFormat=HH:mm:ss.SSS",
        ]
        .into_iter()
        .map(String::from)
        .collect();
        args.extend(
            self.system_properties
                .iter()
                .map(|(k, v)| format!("-D{k}={v}")),
        );
        args.extend([
            "-cp".into(),
            self.env.classpath.clone(),
            self.main_class.into(),
        ]);
        args.push(self.config_path().display().to_string());
        args
    }

    /// Spawns the JVM (through the spawner thread); output is appended to `zookeeper.log`.
    /// Returns the child and the log length before it started.
    fn spawn(&self) -> Result<(Child, u64)> {
        let harness = |what: &str, e: io::Error| {
            Error::Harness(format!(
                "{}: {what} {}: {e}",
                self.name,
                self.log_path().display()
            ))
        };
        let mut log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path())
            .map_err(|e| harness("cannot open log", e))?;
        let offset = log
            .seek(SeekFrom::End(0))
            .map_err(|e| harness("cannot seek log", e))?;
        let args = self.args();
        writeln!(
            log,
            "==== zk-recipes harness: starting {} {}",
            self.env.java.display(),
            args.join(" ")
        )
        .map_err(|e| harness("cannot write log", e))?;
        let stderr = log.try_clone().map_err(|e| harness("cannot dup log", e))?;
        let request = SpawnRequest {
            program: self.env.java.clone(),
            args,
            cwd: self.data_dir.clone(),
            stdout: log,
            stderr,
        };
        let child = spawn_on_spawner_thread(request).map_err(|e| {
            Error::Harness(format!(
                "{}: cannot run {}: {e}; {INSTALL_HINT} (or set JAVA_HOME)",
                self.name,
                self.env.java.display()
            ))
        })?;
        Ok((child, offset))
    }

    fn log_tail(&self) -> String {
        log_tail(&self.log_path(), 0)
    }
}

/// The last lines of `path` after byte `offset`.
fn log_tail(path: &Path, offset: u64) -> String {
    let mut text = String::new();
    let read = File::open(path).and_then(|mut f| {
        f.seek(SeekFrom::Start(offset))?;
        let mut bytes = Vec::new();
        f.read_to_end(&mut bytes)?;
        text = String::from_utf8_lossy(&bytes).into_owned();
        Ok(())
    });
    if let Err(e) = read {
        return format!("(cannot read {}: {e})", path.display());
    }
    let lines: Vec<&str> = text.lines().collect();
    let start = lines.len().saturating_sub(LOG_TAIL_LINES);
    format!(
        "---- last lines of {} ----\n{}",
        path.display(),
        lines[start..].join("\n")
    )
}

struct SpawnRequest {
    program: PathBuf,
    args: Vec<String>,
    cwd: PathBuf,
    stdout: File,
    stderr: File,
}

/// Forks every JVM from one thread that lives as long as the process: `PR_SET_PDEATHSIG`
/// fires when the forking *thread* exits, and test threads exit after each test.
fn spawn_on_spawner_thread(request: SpawnRequest) -> io::Result<Child> {
    type Reply = mpsc::Sender<io::Result<Child>>;
    static SPAWNER: OnceLock<Mutex<mpsc::Sender<(SpawnRequest, Reply)>>> = OnceLock::new();
    let spawner = SPAWNER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<(SpawnRequest, Reply)>();
        std::thread::Builder::new()
            .name("zk-testing-spawner".into())
            .spawn(move || {
                // The sender lives in a static, so this loop never ends.
                for (request, reply) in rx {
                    let _ = reply.send(spawn_jvm(request));
                }
            })
            .expect("cannot start the zk-testing spawner thread");
        Mutex::new(tx)
    });
    let (reply_tx, reply_rx) = mpsc::channel();
    spawner
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .send((request, reply_tx))
        .map_err(|_| io::Error::other("the zk-testing spawner thread is gone"))?;
    reply_rx
        .recv()
        .map_err(|_| io::Error::other("the zk-testing spawner thread is gone"))?
}

fn spawn_jvm(request: SpawnRequest) -> io::Result<Child> {
    use std::os::unix::process::CommandExt;

    let parent = std::process::id();
    let mut cmd = Command::new(&request.program);
    cmd.args(&request.args)
        .current_dir(&request.cwd)
        .stdin(Stdio::null())
        .stdout(request.stdout)
        .stderr(request.stderr)
        .process_group(0);
    // SAFETY: the closure only calls async-signal-safe functions (prctl, getppid).
    unsafe {
        cmd.pre_exec(move || {
            if libc::prctl(
                libc::PR_SET_PDEATHSIG,
                libc::SIGKILL as libc::c_ulong,
                0,
                0,
                0,
            ) != 0
            {
                return Err(io::Error::last_os_error());
            }
            // The parent may have died before prctl took effect.
            if libc::getppid() as u32 != parent {
                return Err(io::Error::other("the test process exited during spawn"));
            }
            Ok(())
        });
    }
    cmd.spawn()
}

/// Binds `n` distinct free ports of 127.0.0.1 at once, then releases them.
fn free_ports(n: usize) -> Result<Vec<u16>> {
    let listeners = (0..n)
        .map(|_| TcpListener::bind((Ipv4Addr::LOCALHOST, 0)))
        .collect::<io::Result<Vec<_>>>()
        .map_err(|e| Error::Harness(format!("cannot find a free port on 127.0.0.1: {e}")))?;
    listeners
        .iter()
        .map(|l| l.local_addr().map(|a| a.port()))
        .collect::<io::Result<Vec<_>>>()
        .map_err(|e| Error::Harness(format!("cannot find a free port on 127.0.0.1: {e}")))
}

fn write_file(path: &Path, contents: &str) -> Result<()> {
    fs::write(path, contents)
        .map_err(|e| Error::Harness(format!("cannot write {}: {e}", path.display())))
}

fn create_dir(path: &Path) -> Result<()> {
    fs::create_dir_all(path)
        .map_err(|e| Error::Harness(format!("cannot create {}: {e}", path.display())))
}

fn temp_dir(prefix: &str) -> Result<TempDir> {
    tempfile::Builder::new()
        .prefix(prefix)
        .tempdir()
        .map_err(|e| Error::Harness(format!("cannot create a temporary directory: {e}")))
}

fn common_config(tick_time: Duration, data_dir: &Path, port: u16) -> String {
    let tick = tick_time.as_millis().max(1);
    format!(
        "tickTime={tick}\n\
         dataDir={}\n\
         clientPort={port}\n\
         clientPortAddress=127.0.0.1\n\
         maxClientCnxns=0\n\
         admin.enableServer=false\n\
         4lw.commands.whitelist=*\n",
        data_dir.display()
    )
}

fn signal(pid: u32, sig: libc::c_int) -> io::Result<()> {
    // SAFETY: kill has no memory-safety preconditions.
    if unsafe { libc::kill(pid as libc::pid_t, sig) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

// ---------------------------------------------------------------------------------------------
// Four-letter words
// ---------------------------------------------------------------------------------------------

fn four_letter_at(addr: SocketAddr, cmd: &str, timeout: Duration) -> io::Result<String> {
    let mut stream = TcpStream::connect_timeout(&addr, timeout)?;
    stream.set_read_timeout(Some(timeout))?;
    stream.set_write_timeout(Some(timeout))?;
    stream.write_all(cmd.as_bytes())?;
    let mut out = String::new();
    stream.read_to_string(&mut out)?;
    Ok(out)
}

/// Parses `mntr` output (`key<TAB>value` lines).
fn parse_mntr(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter_map(|line| line.split_once('\t'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect()
}

/// The `Mode:` of `srvr` output (`leader`, `follower`, `standalone`, ...).
fn parse_mode(srvr: &str) -> Option<String> {
    srvr.lines()
        .find_map(|line| line.strip_prefix("Mode:"))
        .map(|mode| mode.trim().to_string())
}

// ---------------------------------------------------------------------------------------------
// ZooKeeperServer
// ---------------------------------------------------------------------------------------------

/// One real ZooKeeper server JVM: a standalone server from [`ZooKeeperServer::start`], or a
/// member of a [`ZooKeeperCluster`]. It has its own [`FaultProxy`] in front of it.
///
/// Dropping the handle kills the JVM (SIGKILL) and removes its temporary data directory.
///
/// # Examples
///
/// ```no_run
/// # async fn example() -> zk_recipes::Result<()> {
/// use zk_recipes::testing::ZooKeeperServer;
///
/// let mut server = ZooKeeperServer::start()?;
/// let client = zookeeper_client::Client::connect(&server.connect_string()).await.unwrap();
/// server.kill()?; // the client goes Disconnected
/// server.restart()?; // same port, same data: the client reconnects to its session
/// # drop(client);
/// # Ok(())
/// # }
/// ```
pub struct ZooKeeperServer {
    launch: Launch,
    child: Mutex<Option<Child>>,
    paused: AtomicBool,
    proxy: FaultProxy,
    temp: Option<TempDir>,
}

impl std::fmt::Debug for ZooKeeperServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ZooKeeperServer")
            .field("name", &self.launch.name)
            .field("port", &self.launch.port)
            .field("pid", &self.pid())
            .field("data_dir", &self.launch.data_dir)
            .field("proxy", &self.proxy)
            .finish()
    }
}

impl ZooKeeperServer {
    /// Starts a standalone server with the default [`ServerOptions`] and waits until it
    /// answers `ruok`. Blocking: call it from a test before entering async code, or through
    /// `tokio::task::spawn_blocking`.
    ///
    /// # Errors
    ///
    /// * [`Error::Harness`] if Java or the ZooKeeper jars are missing, or the server does not
    ///   answer `ruok` within 30 s (the message holds the tail of the server log).
    pub fn start() -> Result<ZooKeeperServer> {
        ZooKeeperServer::start_with(ServerOptions::new())
    }

    /// Starts a standalone server with `opts` and waits until it answers `ruok`.
    ///
    /// When no port is given and the free port found is taken by the time the JVM binds it,
    /// the start is retried on another port.
    ///
    /// # Errors
    ///
    /// * [`Error::Harness`] as for [`start`](ZooKeeperServer::start), or if the data
    ///   directory cannot be created.
    pub fn start_with(opts: ServerOptions) -> Result<ZooKeeperServer> {
        let env = JavaEnv::detect()?;
        let mut attempt = 0;
        loop {
            attempt += 1;
            let (temp, data_dir) = match &opts.data_dir {
                Some(dir) => (None, dir.clone()),
                None => {
                    let temp = temp_dir("zk-recipes-server-")?;
                    let path = temp.path().to_path_buf();
                    (Some(temp), path)
                }
            };
            create_dir(&data_dir)?;
            // Absolute, since zoo.cfg is read by a JVM running in the data directory.
            let data_dir = fs::canonicalize(&data_dir).map_err(|e| {
                Error::Harness(format!("cannot resolve {}: {e}", data_dir.display()))
            })?;
            let port = match opts.port {
                Some(port) => port,
                None => free_ports(1)?[0],
            };
            let mut config = common_config(opts.tick_time, &data_dir, port);
            for line in &opts.extra_config {
                config.push_str(line);
                config.push('\n');
            }
            let launch = Launch {
                env: env.clone(),
                main_class: STANDALONE_MAIN,
                name: format!("ZooKeeper standalone server on 127.0.0.1:{port}"),
                port,
                data_dir,
                system_properties: opts.system_properties.clone(),
            };
            write_file(&launch.config_path(), &config)?;
            let mut server = ZooKeeperServer::new_stopped(launch, temp)?;
            let offset = server.spawn()?;
            match server.wait_ready(Instant::now() + READY_TIMEOUT) {
                Ok(()) => return Ok(server),
                Err(e) => {
                    let _ = server.kill();
                    let retry = opts.port.is_none()
                        && attempt < PORT_ATTEMPTS
                        && (e.to_string().contains(ANOTHER_PROCESS)
                            || log_tail(&server.launch.log_path(), offset)
                                .contains("Address already in use"));
                    if !retry {
                        return Err(e);
                    }
                }
            }
        }
    }

    fn new_stopped(launch: Launch, temp: Option<TempDir>) -> Result<ZooKeeperServer> {
        let proxy = FaultProxy::start(launch.addr())?;
        Ok(ZooKeeperServer {
            launch,
            child: Mutex::new(None),
            paused: AtomicBool::new(false),
            proxy,
            temp,
        })
    }

    fn child(&self) -> MutexGuard<'_, Option<Child>> {
        self.child.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Spawns the JVM without waiting for it. Returns the log offset of this start.
    fn spawn(&self) -> Result<u64> {
        let mut child = self.child();
        if child.is_some() {
            return Err(Error::Harness(format!(
                "{} is already running",
                self.launch.name
            )));
        }
        let (spawned, offset) = self.launch.spawn()?;
        *child = Some(spawned);
        self.paused.store(false, Ordering::SeqCst);
        Ok(offset)
    }

    /// Polls until the JVM answers `ruok` with `imok`, failing early if it exits.
    ///
    /// Two more checks, because `ruok` alone is not enough:
    /// * `envi` must report our data directory as `user.dir`: a JVM that lost the race for
    ///   its port would otherwise be declared ready by a stranger answering on that port;
    /// * a standalone server must also report a `Mode:` in `srvr`, because ZooKeeper answers
    ///   `ruok` ~100 ms before it serves, and closes client connections until then.
    fn wait_ready(&self, deadline: Instant) -> Result<()> {
        let data_dir = &self.launch.data_dir;
        let expected = format!(
            "user.dir={}",
            fs::canonicalize(data_dir)
                .unwrap_or_else(|_| data_dir.clone())
                .display()
        );
        let standalone = self.launch.main_class == STANDALONE_MAIN;
        loop {
            if let Some(status) = self.exit_status() {
                return Err(Error::Harness(format!(
                    "{} exited during startup ({status})\n{}",
                    self.launch.name,
                    self.launch.log_tail()
                )));
            }
            let Err(last) = self.readiness(&expected, standalone) else {
                return Ok(());
            };
            if Instant::now() >= deadline {
                return Err(Error::Harness(format!(
                    "{} was not ready within {READY_TIMEOUT:?} (last check: {last})\n{}",
                    self.launch.name,
                    self.launch.log_tail()
                )));
            }
            std::thread::sleep(POLL_INTERVAL);
        }
    }

    fn readiness(
        &self,
        expected_user_dir: &str,
        standalone: bool,
    ) -> std::result::Result<(), String> {
        let ask =
            |cmd| four_letter_at(self.addr(), cmd, POLL_TIMEOUT).map_err(|e| format!("{cmd}: {e}"));
        let ruok = ask("ruok")?;
        if ruok != "imok" {
            return Err(format!("ruok answered {ruok:?}"));
        }
        let envi = ask("envi")?;
        if !envi.lines().any(|line| line.trim() == expected_user_dir) {
            return Err(format!(
                "{ANOTHER_PROCESS} (envi has no {expected_user_dir:?}):\n{}",
                envi.trim()
            ));
        }
        if standalone {
            let srvr = ask("srvr")?;
            if parse_mode(&srvr).is_none() {
                return Err(format!("srvr answered {:?}", srvr.trim()));
            }
        }
        Ok(())
    }

    /// `Some(status)` if the JVM was started and has exited (it is then reaped).
    fn exit_status(&self) -> Option<ExitStatus> {
        let mut guard = self.child();
        let status = guard.as_mut()?.try_wait().ok()??;
        *guard = None;
        Some(status)
    }

    /// `"127.0.0.1:PORT"`, the server's client address.
    pub fn connect_string(&self) -> String {
        self.addr().to_string()
    }

    /// `"127.0.0.1:PROXYPORT"`, the address of this server's [`FaultProxy`].
    ///
    /// The shared server's proxy is shared by every test of the binary: a test that blocks
    /// a proxy should start its own with [`FaultProxy::start`]`(server.addr())`.
    pub fn connect_string_via_proxy(&self) -> String {
        self.proxy.addr().to_string()
    }

    /// The fault-injection proxy in front of this server.
    pub fn proxy(&self) -> &FaultProxy {
        &self.proxy
    }

    /// The client port.
    pub fn port(&self) -> u16 {
        self.launch.port
    }

    /// The client address, `127.0.0.1:PORT`.
    pub fn addr(&self) -> SocketAddr {
        self.launch.addr()
    }

    /// The directory holding `zoo.cfg`, `zookeeper.log` and the data.
    pub fn data_dir(&self) -> &Path {
        &self.launch.data_dir
    }

    /// The server log (JVM stdout and stderr, appended across restarts).
    pub fn log_path(&self) -> PathBuf {
        self.launch.log_path()
    }

    /// The JVM's process id, `None` once it was stopped or killed (or found dead).
    pub fn pid(&self) -> Option<u32> {
        let mut guard = self.child();
        let child = guard.as_mut()?;
        if let Ok(Some(_)) = child.try_wait() {
            *guard = None;
            return None;
        }
        Some(child.id())
    }

    /// Whether the JVM is alive (it may be paused).
    pub fn is_running(&self) -> bool {
        self.pid().is_some()
    }

    /// Whether [`pause`](ZooKeeperServer::pause) stopped the JVM.
    pub fn is_paused(&self) -> bool {
        self.paused.load(Ordering::SeqCst) && self.is_running()
    }

    /// Stops the JVM with SIGTERM and waits for it to exit (SIGKILL after 10 s). A no-op if it
    /// is not running.
    ///
    /// # Errors
    ///
    /// * [`Error::Harness`] if the process cannot be signalled or waited for.
    pub fn stop(&mut self) -> Result<()> {
        self.terminate(libc::SIGTERM)
    }

    /// Kills the JVM with SIGKILL and waits for it to exit. A no-op if it is not running.
    ///
    /// # Errors
    ///
    /// * [`Error::Harness`] if the process cannot be signalled or waited for.
    pub fn kill(&mut self) -> Result<()> {
        self.terminate(libc::SIGKILL)
    }

    fn terminate(&self, sig: libc::c_int) -> Result<()> {
        let mut guard = self.child();
        let Some(child) = guard.as_mut() else {
            return Ok(());
        };
        let pid = child.id();
        let fail = |e: io::Error| Error::Harness(format!("{} (pid {pid}): {e}", self.launch.name));
        if child.try_wait().map_err(fail)?.is_none() {
            signal(pid, sig).map_err(fail)?;
            // A stopped process acts on SIGTERM only once continued.
            let _ = signal(pid, libc::SIGCONT);
            let deadline = Instant::now() + STOP_TIMEOUT;
            while child.try_wait().map_err(fail)?.is_none() {
                if Instant::now() >= deadline {
                    signal(pid, libc::SIGKILL).map_err(fail)?;
                    child.wait().map_err(fail)?;
                    break;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        *guard = None;
        self.paused.store(false, Ordering::SeqCst);
        Ok(())
    }

    /// Starts the server again on the same port and data directory (stopping it first if it is
    /// running) and waits until it answers `ruok`.
    ///
    /// For a [`ZooKeeperCluster`] member, `ruok` only means the JVM is up: call
    /// [`ZooKeeperCluster::wait_for_quorum`] to wait until it serves.
    ///
    /// # Errors
    ///
    /// * [`Error::Harness`] if the JVM cannot be started or does not answer within 30 s.
    pub fn restart(&mut self) -> Result<()> {
        self.stop()?;
        self.spawn()?;
        self.wait_ready(Instant::now() + READY_TIMEOUT)
    }

    /// Freezes the JVM with SIGSTOP: connections stay open but nothing answers, as in a long
    /// GC pause.
    ///
    /// # Errors
    ///
    /// * [`Error::Harness`] if the server is not running.
    pub fn pause(&self) -> Result<()> {
        self.send_signal(libc::SIGSTOP)?;
        self.paused.store(true, Ordering::SeqCst);
        Ok(())
    }

    /// Continues a JVM frozen by [`pause`](ZooKeeperServer::pause) (SIGCONT).
    ///
    /// # Errors
    ///
    /// * [`Error::Harness`] if the server is not running.
    pub fn resume(&self) -> Result<()> {
        self.send_signal(libc::SIGCONT)?;
        self.paused.store(false, Ordering::SeqCst);
        Ok(())
    }

    fn send_signal(&self, sig: libc::c_int) -> Result<()> {
        let pid = self
            .pid()
            .ok_or_else(|| Error::Harness(format!("{} is not running", self.launch.name)))?;
        signal(pid, sig)
            .map_err(|e| Error::Harness(format!("{} (pid {pid}): {e}", self.launch.name)))
    }

    /// Sends a four-letter word (`ruok`, `srvr`, `mntr`, `cons`, `wchp`, `dump`, ...) and
    /// returns the raw reply. Blocking, with 5 s connect/read/write timeouts.
    ///
    /// # Errors
    ///
    /// * [`Error::Harness`] if `cmd` is not four ASCII letters, or the server cannot be reached
    ///   or does not answer in time (for example while paused).
    pub fn four_letter(&self, cmd: &str) -> Result<String> {
        self.four_letter_timeout(cmd, FOUR_LETTER_TIMEOUT)
    }

    /// [`four_letter`](ZooKeeperServer::four_letter) with another timeout for each of connect,
    /// read and write.
    ///
    /// # Errors
    ///
    /// * [`Error::Harness`] as for [`four_letter`](ZooKeeperServer::four_letter).
    pub fn four_letter_timeout(&self, cmd: &str, timeout: Duration) -> Result<String> {
        if cmd.len() != 4 || !cmd.bytes().all(|b| b.is_ascii_alphabetic()) {
            return Err(Error::Harness(format!("{cmd:?} is not a four-letter word")));
        }
        let reply = four_letter_at(self.addr(), cmd, timeout).map_err(|e| {
            Error::Harness(format!(
                "four-letter word {cmd} to {}: {e}",
                self.launch.name
            ))
        })?;
        if reply.is_empty() {
            // ZooKeeper closes the connection without a word for an unknown command.
            return Err(Error::Harness(format!(
                "four-letter word {cmd} to {}: no reply (unknown command?)",
                self.launch.name
            )));
        }
        Ok(reply)
    }

    /// `mntr`, parsed into `key → value` (`zk_watch_count`, `zk_server_state`, ...).
    ///
    /// # Errors
    ///
    /// * [`Error::Harness`] if the server cannot be reached or is not serving.
    pub fn mntr(&self) -> Result<BTreeMap<String, String>> {
        let text = self.four_letter("mntr")?;
        let map = parse_mntr(&text);
        if map.is_empty() {
            return Err(Error::Harness(format!(
                "mntr from {}: {}",
                self.launch.name,
                text.trim()
            )));
        }
        Ok(map)
    }

    /// `cons`: the server's connections and their sessions, raw.
    ///
    /// # Errors
    ///
    /// * [`Error::Harness`] if the server cannot be reached.
    pub fn cons(&self) -> Result<String> {
        self.four_letter("cons")
    }

    /// `wchp`: data watches by path, raw. In 3.8 it lists data watches only; count child
    /// watches with `mntr`'s `zk_watch_count`.
    ///
    /// # Errors
    ///
    /// * [`Error::Harness`] if the server cannot be reached.
    pub fn wchp(&self) -> Result<String> {
        self.four_letter("wchp")
    }

    /// The `Mode:` reported by `srvr`: `"standalone"`, `"leader"` or `"follower"`.
    ///
    /// # Errors
    ///
    /// * [`Error::Harness`] if the server cannot be reached or is not serving (for example a
    ///   quorum member during leader election).
    pub fn mode(&self) -> Result<String> {
        self.mode_timeout(FOUR_LETTER_TIMEOUT)
    }

    fn mode_timeout(&self, timeout: Duration) -> Result<String> {
        let srvr = self.four_letter_timeout("srvr", timeout)?;
        parse_mode(&srvr).ok_or_else(|| {
            Error::Harness(format!(
                "{} is not serving: {}",
                self.launch.name,
                srvr.trim()
            ))
        })
    }

    /// Kills the JVM and removes the temporary directory without needing `&mut` (for the
    /// shared server at process exit). Must not panic.
    fn kill_at_exit(&self) {
        if let Ok(mut guard) = self.child.try_lock() {
            if let Some(child) = guard.as_mut() {
                let _ = child.kill();
                let _ = child.wait();
            }
            *guard = None;
        }
        if let Some(temp) = &self.temp {
            let _ = fs::remove_dir_all(temp.path());
        }
    }
}

impl Drop for ZooKeeperServer {
    fn drop(&mut self) {
        let _ = self.kill();
    }
}

// ---------------------------------------------------------------------------------------------
// ZooKeeperCluster
// ---------------------------------------------------------------------------------------------

/// A ZooKeeper ensemble of real `QuorumPeerMain` JVMs on 127.0.0.1, each member a
/// [`ZooKeeperServer`] handle with its own [`FaultProxy`].
///
/// Dropping the cluster kills every member and removes the data directories.
///
/// # Examples
///
/// ```no_run
/// use std::time::Duration;
/// use zk_recipes::testing::ZooKeeperCluster;
///
/// let mut cluster = ZooKeeperCluster::start(3).unwrap();
/// let leader = cluster.leader().unwrap();
/// cluster.member_mut(leader).kill().unwrap();
/// cluster.wait_for_quorum(Duration::from_secs(30)).unwrap();
/// assert_ne!(cluster.leader(), Some(leader));
/// ```
#[derive(Debug)]
pub struct ZooKeeperCluster {
    // Members drop (and their JVMs die) before the directory is removed.
    members: Vec<ZooKeeperServer>,
    _temp: TempDir,
}

impl ZooKeeperCluster {
    /// Starts an ensemble of `n` members (`server.N=127.0.0.1:peerPort:electionPort`,
    /// tickTime 500 ms, initLimit 10, syncLimit 5, `standaloneEnabled=false` so that even one
    /// member runs as a quorum) and waits until every member serves and one is the leader.
    /// Blocking (about 3 s for three members): call it through `tokio::task::spawn_blocking`
    /// once clients exist.
    ///
    /// # Errors
    ///
    /// * [`Error::InvalidArgument`] if `n` is 0.
    /// * [`Error::Harness`] if Java or the jars are missing, a member does not answer `ruok`
    ///   within 30 s, or no quorum forms within 60 s (with the members' log tails).
    pub fn start(n: usize) -> Result<ZooKeeperCluster> {
        if n == 0 {
            return Err(Error::InvalidArgument(
                "a ZooKeeper cluster needs at least one member".into(),
            ));
        }
        let env = JavaEnv::detect()?;
        let mut attempt = 0;
        loop {
            attempt += 1;
            match ZooKeeperCluster::try_start(&env, n) {
                Ok(cluster) => return Ok(cluster),
                Err(e)
                    if attempt < PORT_ATTEMPTS
                        && (e.to_string().contains("Address already in use")
                            || e.to_string().contains(ANOTHER_PROCESS)) =>
                {
                    continue
                }
                Err(e) => return Err(e),
            }
        }
    }

    fn try_start(env: &JavaEnv, n: usize) -> Result<ZooKeeperCluster> {
        let temp = temp_dir("zk-recipes-cluster-")?;
        let ports = free_ports(3 * n)?;
        let (client_ports, quorum_ports) = ports.split_at(n);
        let servers: String = (0..n)
            .map(|i| {
                format!(
                    "server.{}=127.0.0.1:{}:{}\n",
                    i + 1,
                    quorum_ports[2 * i],
                    quorum_ports[2 * i + 1]
                )
            })
            .collect();
        let mut members = Vec::with_capacity(n);
        for (i, &port) in client_ports.iter().enumerate() {
            let myid = i + 1;
            let data_dir = temp.path().join(format!("member-{myid}"));
            create_dir(&data_dir)?;
            write_file(&data_dir.join("myid"), &format!("{myid}\n"))?;
            let config = format!(
                "{}initLimit=10\nsyncLimit=5\nstandaloneEnabled=false\nreconfigEnabled=false\n{servers}",
                common_config(Duration::from_millis(500), &data_dir, port)
            );
            let launch = Launch {
                env: env.clone(),
                main_class: QUORUM_MAIN,
                name: format!("ZooKeeper cluster member {myid} (index {i}) on 127.0.0.1:{port}"),
                port,
                data_dir,
                system_properties: Vec::new(),
            };
            write_file(&launch.config_path(), &config)?;
            members.push(ZooKeeperServer::new_stopped(launch, None)?);
        }
        let cluster = ZooKeeperCluster {
            members,
            _temp: temp,
        };
        cluster.spawn_all_and_wait()?;
        Ok(cluster)
    }

    /// Spawns every member at once (elections are fastest when they start together), then
    /// waits for `ruok` from each and for a quorum.
    fn spawn_all_and_wait(&self) -> Result<()> {
        for member in &self.members {
            member.spawn()?;
        }
        let deadline = Instant::now() + READY_TIMEOUT;
        for member in &self.members {
            member.wait_ready(deadline)?;
        }
        self.wait_for_quorum(QUORUM_TIMEOUT)
    }

    /// Every member's client address, comma-separated.
    pub fn connect_string(&self) -> String {
        self.members
            .iter()
            .map(ZooKeeperServer::connect_string)
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Every member's proxy address, comma-separated.
    pub fn connect_string_via_proxy(&self) -> String {
        self.members
            .iter()
            .map(ZooKeeperServer::connect_string_via_proxy)
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The members; index `i` is `server.{i+1}` in the configuration.
    pub fn members(&self) -> &[ZooKeeperServer] {
        &self.members
    }

    /// Member `i`, to stop, kill, restart or pause it.
    ///
    /// # Panics
    ///
    /// If `i` is out of range.
    pub fn member_mut(&mut self, i: usize) -> &mut ZooKeeperServer {
        &mut self.members[i]
    }

    /// Every member's proxy, for [`expire_session`].
    pub fn proxies(&self) -> Vec<&FaultProxy> {
        self.members.iter().map(ZooKeeperServer::proxy).collect()
    }

    /// The index of the member whose `srvr` says `Mode: leader`, if any. Paused and dead
    /// members are skipped. During an election there may be none.
    pub fn leader(&self) -> Option<usize> {
        self.members.iter().position(|m| {
            !m.is_paused()
                && m.is_running()
                && m.mode_timeout(Duration::from_secs(2))
                    .is_ok_and(|mode| mode == "leader")
        })
    }

    /// Waits until exactly one member is the leader, a majority serves, and every running
    /// member that is not paused serves (is leader or follower). Blocking: polls `srvr`.
    ///
    /// # Errors
    ///
    /// * [`Error::Harness`] if that does not happen within `timeout`, with each member's
    ///   status and the log tails of those not serving.
    pub fn wait_for_quorum(&self, timeout: Duration) -> Result<()> {
        let deadline = Instant::now() + timeout;
        loop {
            let statuses: Vec<MemberStatus> = self.members.iter().map(MemberStatus::of).collect();
            let leaders = statuses
                .iter()
                .filter(|s| matches!(s, MemberStatus::Serving(m) if m == "leader"))
                .count();
            let serving = statuses
                .iter()
                .filter(|s| matches!(s, MemberStatus::Serving(_)))
                .count();
            let waiting = statuses
                .iter()
                .any(|s| matches!(s, MemberStatus::NotServing(_)));
            if leaders == 1 && serving > self.members.len() / 2 && !waiting {
                return Ok(());
            }
            if Instant::now() >= deadline {
                let mut report =
                    format!("no ZooKeeper quorum within {timeout:?} ({leaders} leaders, {serving} serving):\n");
                for (member, status) in self.members.iter().zip(&statuses) {
                    report.push_str(&format!("  {}: {status}\n", member.launch.name));
                }
                for (member, status) in self.members.iter().zip(&statuses) {
                    if !matches!(status, MemberStatus::Serving(_)) {
                        report.push_str(&member.launch.log_tail());
                        report.push('\n');
                    }
                }
                return Err(Error::Harness(report));
            }
            std::thread::sleep(POLL_INTERVAL);
        }
    }

    /// Stops every member (SIGTERM), starts them all again on the same ports and data, and
    /// waits for a quorum. Blocking.
    ///
    /// # Errors
    ///
    /// * [`Error::Harness`] as for [`start`](ZooKeeperCluster::start).
    pub fn restart_all(&mut self) -> Result<()> {
        for member in &mut self.members {
            member.stop()?;
        }
        self.spawn_all_and_wait()
    }
}

enum MemberStatus {
    Down,
    Paused,
    NotServing(String),
    Serving(String),
}

impl std::fmt::Display for MemberStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            MemberStatus::Down => f.write_str("not running"),
            MemberStatus::Paused => f.write_str("paused"),
            MemberStatus::NotServing(why) => write!(f, "not serving ({why})"),
            MemberStatus::Serving(mode) => write!(f, "serving as {mode}"),
        }
    }
}

impl MemberStatus {
    fn of(member: &ZooKeeperServer) -> MemberStatus {
        if !member.is_running() {
            MemberStatus::Down
        } else if member.is_paused() {
            MemberStatus::Paused
        } else {
            match member.mode_timeout(POLL_TIMEOUT) {
                Ok(mode) if mode == "leader" || mode == "follower" => MemberStatus::Serving(mode),
                Ok(mode) => MemberStatus::NotServing(format!("mode {mode}")),
                Err(e) => MemberStatus::NotServing(e.to_string()),
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Shared server, session expiry, helpers
// ---------------------------------------------------------------------------------------------

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
            .with_system_property("k", "v");
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
