//! An ensemble: [`ZooKeeperCluster`].

#[allow(unused_imports)]
use super::*;

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
    pub(crate) members: Vec<ZooKeeperServer>,
    pub(crate) _temp: TempDir,
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

    pub(crate) fn try_start(env: &JavaEnv, n: usize) -> Result<ZooKeeperCluster> {
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
                java_defaults: false,
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
    pub(crate) fn spawn_all_and_wait(&self) -> Result<()> {
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

pub(crate) enum MemberStatus {
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
    pub(crate) fn of(member: &ZooKeeperServer) -> MemberStatus {
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
