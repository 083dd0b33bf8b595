//! Launching ZooKeeper JVMs (one spawner thread, so `PR_SET_PDEATHSIG` holds), ports,
//! files, and the four-letter words.

#[allow(unused_imports)]
use super::*;

/// Where Java and the ZooKeeper jars are.
#[derive(Debug, Clone)]
pub(crate) struct JavaEnv {
    pub(crate) java: PathBuf,
    pub(crate) classpath: String,
}

impl JavaEnv {
    pub(crate) fn detect() -> Result<JavaEnv> {
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

pub(crate) fn find_java() -> Option<PathBuf> {
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
pub(crate) struct Launch {
    pub(crate) env: JavaEnv,
    pub(crate) main_class: &'static str,
    pub(crate) name: String,
    pub(crate) port: u16,
    pub(crate) data_dir: PathBuf,
    pub(crate) system_properties: Vec<(String, String)>,
    /// Leave out the harness's heap and GC flags (see `ServerOptions::with_java_defaults`).
    pub(crate) java_defaults: bool,
}

impl Launch {
    pub(crate) fn config_path(&self) -> PathBuf {
        self.data_dir.join(CONFIG_FILE)
    }

    pub(crate) fn log_path(&self) -> PathBuf {
        self.data_dir.join(LOG_FILE)
    }

    pub(crate) fn addr(&self) -> SocketAddr {
        SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, self.port))
    }

    pub(crate) fn args(&self) -> Vec<String> {
        let mut args: Vec<String> = Vec::new();
        if !self.java_defaults {
            // A small footprint, for many test servers on one machine.
            args.extend(["-Xmx256m", "-XX:+UseSerialGC"].map(String::from));
        }
        let common = [
            "-XX:-UsePerfData",
            "-Djava.net.preferIPv4Stack=true",
            "-Dzookeeper.admin.enableServer=false",
            "-Dzookeeper.jmx.log4j.disable=true",
            // No fsync: a SIGKILLed JVM still leaves its writes in the page cache.
            "-Dzookeeper.forceSync=no",
            // Faster leader election when members start at slightly different times.
            "-Dzookeeper.fastleader.maxNotificationInterval=1000",
            "-Dzookeeper.cnxTimeout=2000",
            // The administrator of `testing::SUPER_AUTH`: base64(sha1("super:zk-recipes-test")).
            "-Dzookeeper.DigestAuthenticationProvider.superDigest=super:hWiXL5GMnqghRLBw/q8aWKBcHCI=",
            "-Dorg.slf4j.simpleLogger.defaultLogLevel=info",
            "-Dorg.slf4j.simpleLogger.showDateTime=true",
            "-Dorg.slf4j.simpleLogger.dateTimeFormat=HH:mm:ss.SSS",
        ];
        args.extend(common.map(String::from));
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
    pub(crate) fn spawn(&self) -> Result<(Child, u64)> {
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

    pub(crate) fn log_tail(&self) -> String {
        log_tail(&self.log_path(), 0)
    }
}

/// The last lines of `path` after byte `offset`.
pub(crate) fn log_tail(path: &Path, offset: u64) -> String {
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

pub(crate) struct SpawnRequest {
    pub(crate) program: PathBuf,
    pub(crate) args: Vec<String>,
    pub(crate) cwd: PathBuf,
    pub(crate) stdout: File,
    pub(crate) stderr: File,
}

/// Forks every JVM from one thread that lives as long as the process: `PR_SET_PDEATHSIG`
/// fires when the forking *thread* exits, and test threads exit after each test.
pub(crate) fn spawn_on_spawner_thread(request: SpawnRequest) -> io::Result<Child> {
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

pub(crate) fn spawn_jvm(request: SpawnRequest) -> io::Result<Child> {
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
pub(crate) fn free_ports(n: usize) -> Result<Vec<u16>> {
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

pub(crate) fn write_file(path: &Path, contents: &str) -> Result<()> {
    fs::write(path, contents)
        .map_err(|e| Error::Harness(format!("cannot write {}: {e}", path.display())))
}

pub(crate) fn create_dir(path: &Path) -> Result<()> {
    fs::create_dir_all(path)
        .map_err(|e| Error::Harness(format!("cannot create {}: {e}", path.display())))
}

pub(crate) fn temp_dir(prefix: &str) -> Result<TempDir> {
    tempfile::Builder::new()
        .prefix(prefix)
        .tempdir()
        .map_err(|e| Error::Harness(format!("cannot create a temporary directory: {e}")))
}

pub(crate) fn common_config(tick_time: Duration, data_dir: &Path, port: u16) -> String {
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

pub(crate) fn signal(pid: u32, sig: libc::c_int) -> io::Result<()> {
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

pub(crate) fn four_letter_at(addr: SocketAddr, cmd: &str, timeout: Duration) -> io::Result<String> {
    let mut stream = TcpStream::connect_timeout(&addr, timeout)?;
    stream.set_read_timeout(Some(timeout))?;
    stream.set_write_timeout(Some(timeout))?;
    stream.write_all(cmd.as_bytes())?;
    let mut out = String::new();
    stream.read_to_string(&mut out)?;
    Ok(out)
}

/// Parses `mntr` output (`key<TAB>value` lines).
pub(crate) fn parse_mntr(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter_map(|line| line.split_once('\t'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect()
}

/// The `Mode:` of `srvr` output (`leader`, `follower`, `standalone`, ...).
pub(crate) fn parse_mode(srvr: &str) -> Option<String> {
    srvr.lines()
        .find_map(|line| line.strip_prefix("Mode:"))
        .map(|mode| mode.trim().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn launch(java_defaults: bool) -> Launch {
        Launch {
            env: JavaEnv {
                java: PathBuf::from("java"),
                classpath: "zookeeper.jar".into(),
            },
            main_class: STANDALONE_MAIN,
            name: "test".into(),
            port: 2181,
            data_dir: PathBuf::from("/nonexistent"),
            system_properties: vec![("k".into(), "v".into())],
            java_defaults,
        }
    }

    #[test]
    fn java_defaults_leave_out_only_the_heap_and_gc_flags() {
        let small = launch(false).args();
        let plain = launch(true).args();
        assert!(small.iter().any(|a| a == "-Xmx256m"), "{small:?}");
        assert!(small.iter().any(|a| a == "-XX:+UseSerialGC"), "{small:?}");
        let left: Vec<_> = small
            .iter()
            .filter(|a| *a != "-Xmx256m" && *a != "-XX:+UseSerialGC")
            .collect();
        assert_eq!(left, plain.iter().collect::<Vec<_>>());
        assert!(plain.iter().any(|a| a == "-Dk=v"), "{plain:?}");
    }
}
