//! What a test server is started with: [`ServerOptions`].

#[allow(unused_imports)]
use super::*;

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
    /// Java's own garbage collector and heap size instead of the harness's small footprint
    /// (`-Xmx256m -XX:+UseSerialGC`). Default `false`.
    pub java_defaults: bool,
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
            java_defaults: false,
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

    /// Leaves the JVM's garbage collector and heap size to Java's defaults, as a plain
    /// `java -cp ... ZooKeeperServerMain` does (Debian's `zkServer.sh`, the peers' benchmark
    /// script), instead of the harness's small footprint for many test servers on one machine
    /// (`-Xmx256m -XX:+UseSerialGC`). For benchmarks that compare against such a server: on a
    /// 2-core machine the two answer at measurably different speeds.
    pub fn with_java_defaults(mut self) -> ServerOptions {
        self.java_defaults = true;
        self
    }
}
