//! A standalone server: [`ZooKeeperServer`].

#[allow(unused_imports)]
use super::*;

/// One real ZooKeeper server JVM: a standalone server from [`ZooKeeperServer::start`], or a
/// member of a [`ZooKeeperCluster`]. It has its own [`FaultProxy`] in front of it.
///
/// Dropping the handle kills the JVM (SIGKILL) and removes its temporary data directory.
///
/// # Examples
///
/// ```no_run
/// # async fn example() -> zk_recipes::testing::Result<()> {
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
    pub(crate) launch: Launch,
    pub(crate) child: Mutex<Option<Child>>,
    pub(crate) paused: AtomicBool,
    pub(crate) proxy: FaultProxy,
    pub(crate) temp: Option<TempDir>,
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
                java_defaults: opts.java_defaults,
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

    pub(crate) fn new_stopped(launch: Launch, temp: Option<TempDir>) -> Result<ZooKeeperServer> {
        let proxy = FaultProxy::start(launch.addr())?;
        Ok(ZooKeeperServer {
            launch,
            child: Mutex::new(None),
            paused: AtomicBool::new(false),
            proxy,
            temp,
        })
    }

    pub(crate) fn child(&self) -> MutexGuard<'_, Option<Child>> {
        self.child.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Spawns the JVM without waiting for it. Returns the log offset of this start.
    pub(crate) fn spawn(&self) -> Result<u64> {
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
    pub(crate) fn wait_ready(&self, deadline: Instant) -> Result<()> {
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

    pub(crate) fn readiness(
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
    pub(crate) fn exit_status(&self) -> Option<ExitStatus> {
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

    pub(crate) fn terminate(&self, sig: libc::c_int) -> Result<()> {
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
        // The signal is delivered asynchronously: on a loaded machine the JVM may still answer
        // for a moment. Return once the kernel reports it stopped.
        if let Some(pid) = self.pid() {
            let deadline = Instant::now() + Duration::from_secs(5);
            while Instant::now() < deadline {
                let stat = fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
                // The state follows the parenthesised command name.
                let state = stat
                    .rsplit(')')
                    .next()
                    .and_then(|r| r.split_whitespace().next());
                if matches!(state, Some("T" | "t")) {
                    break;
                }
                std::thread::sleep(Duration::from_millis(5));
            }
        }
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

    pub(crate) fn send_signal(&self, sig: libc::c_int) -> Result<()> {
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

    pub(crate) fn mode_timeout(&self, timeout: Duration) -> Result<String> {
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
    pub(crate) fn kill_at_exit(&self) {
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
