//! The argument grammar. Usage errors exit with status 2 (clap's own, and ours).

use std::ffi::OsString;
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};
use zk_recipes::{Layout, LossPolicy};

use crate::duration;

const AFTER_HELP: &str = "\
Exit status:
  CMD's status   CMD ran to the end under the lock (128+N if signal N ended it, 137 if
                 SIGKILLed after --grace)
  75             the lock was not acquired (--try found it busy, or --timeout passed);
                 --conflict-exit-code N changes it
  76             the lock or leadership was lost while CMD ran (CMD got SIGTERM, then
                 SIGKILL); --lost-exit-code N changes it
  69             ZooKeeper could not be reached within the connect timeout
  2              usage error
  1              any other error
  128+N          signal N ended zkr before CMD ran (143: SIGTERM while waiting)
CMD runs in its own process group with ZK_LOCK_PATH, ZK_LOCK_NODE, ZK_FENCING_TOKEN (decimal)
and ZK_SESSION_ID (hex) in its environment, and gets the terminal when zkr has it. SIGTERM,
SIGINT, SIGHUP and SIGQUIT sent to zkr go to CMD's group, with SIGKILL after --grace;
SIGUSR1 and SIGUSR2 are passed on. If zkr dies (even by SIGKILL) CMD's group is killed.
Logs: warnings by default; RUST_LOG (or ZKR_LOG, which wins) sets the filter, e.g.
RUST_LOG=debug.";

/// ZooKeeper coordination from the shell: run a command under a fair lock, a semaphore, a
/// read/write lock or a leadership, and see who holds what.
#[derive(Debug, Parser)]
#[command(name = "zkr", version, after_help = AFTER_HELP)]
pub struct Cli {
    #[command(flatten)]
    pub global: Global,
    #[command(subcommand)]
    pub command: Command,
}

/// Options of every command that talks to ZooKeeper.
#[derive(Debug, Args)]
pub struct Global {
    /// ZooKeeper servers, `host:port[,host:port...]`, optionally with a `/chroot` suffix
    /// [default: $ZK_CONNECT]
    #[arg(
        long,
        env = "ZK_CONNECT",
        value_name = "HOSTS",
        global = true,
        hide_env = true,
        help_heading = "ZooKeeper options"
    )]
    pub connect: Option<String>,

    /// Session timeout to ask for (100ms..1h); the server may grant another within its
    /// limits, which zkr then uses and warns about. Also the connect timeout unless
    /// --connect-timeout is given
    #[arg(long, value_name = "DUR", default_value = "10s", value_parser = duration::parse_timeout, global = true, help_heading = "ZooKeeper options")]
    pub session_timeout: Duration,

    /// How long to try reaching ZooKeeper before exiting 69 (100ms..1h) [default: the
    /// session timeout]
    #[arg(long, value_name = "DUR", value_parser = duration::parse_timeout, global = true, help_heading = "ZooKeeper options")]
    pub connect_timeout: Option<Duration>,

    /// Root every path under this ZooKeeper node (it must exist)
    #[arg(
        long,
        value_name = "PATH",
        global = true,
        help_heading = "ZooKeeper options"
    )]
    pub chroot: Option<String>,

    /// When a held lock counts as lost: `grace` (the connection was down long enough that
    /// the server may have expired the session), `suspend` (any disconnect), `expiry` (only a
    /// known expiry)
    #[arg(long, value_enum, value_name = "POLICY", default_value_t = LossPolicy::Grace, global = true, help_heading = "ZooKeeper options")]
    pub loss_policy: LossPolicy,

    /// Authenticate as `digest:USER:PASSWORD` [default: $ZK_AUTH]. Prefer ZK_AUTH or
    /// --auth-file: a command line is visible to every user in `ps`
    #[arg(
        long,
        env = "ZK_AUTH",
        hide_env_values = true,
        value_name = "digest:USER:PASSWORD",
        global = true,
        help_heading = "Security options"
    )]
    pub auth: Option<String>,

    /// Read `digest:USER:PASSWORD` from FILE (its first line); wins over --auth and ZK_AUTH
    #[arg(
        long,
        value_name = "FILE",
        global = true,
        help_heading = "Security options"
    )]
    pub auth_file: Option<PathBuf>,

    /// ACL of the nodes zkr creates: `open` (anyone may do anything), `creator` (only the
    /// --auth user; other users can neither queue nor delete them)
    #[arg(long, value_enum, value_name = "ACL", default_value_t = AclArg::Open, global = true, help_heading = "Security options")]
    pub acl: AclArg,

    /// Connect with TLS, trusting the CA certificates in FILE (PEM); --connect then names the
    /// servers' secureClientPort
    #[arg(
        long,
        value_name = "FILE",
        global = true,
        help_heading = "Security options"
    )]
    pub tls_ca: Option<PathBuf>,

    /// Client certificate (PEM) for servers that require one (with --tls-key)
    #[arg(
        long,
        value_name = "FILE",
        requires_all = ["tls_key", "tls_ca"],
        global = true,
        help_heading = "Security options"
    )]
    pub tls_cert: Option<PathBuf>,

    /// Private key (PEM) of --tls-cert
    #[arg(
        long,
        value_name = "FILE",
        requires = "tls_cert",
        global = true,
        help_heading = "Security options"
    )]
    pub tls_key: Option<PathBuf>,

    /// Exit status when the lock is not acquired (--try found it busy, --timeout passed),
    /// like flock -E
    #[arg(long, value_name = "N", default_value_t = crate::EXIT_NOT_ACQUIRED as u8, global = true, help_heading = "Exit status options")]
    pub conflict_exit_code: u8,

    /// Exit status when the lock or leadership is lost while CMD runs
    #[arg(long, value_name = "N", default_value_t = crate::EXIT_LOST as u8, global = true, help_heading = "Exit status options")]
    pub lost_exit_code: u8,

    /// Serve the library's metrics (zk_recipes_*: acquires, hand-offs, holds, losses,
    /// session events, requests) in Prometheus text format on http://HOST:PORT/ while zkr
    /// runs [default: $ZKR_METRICS_ADDR]
    #[arg(
        long,
        env = "ZKR_METRICS_ADDR",
        hide_env = true,
        value_name = "HOST:PORT",
        value_parser = parse_listen_addr,
        global = true,
        help_heading = "Observability options"
    )]
    pub metrics_addr: Option<SocketAddr>,
}

/// `HOST:PORT` to listen on: an IP address, or a name that resolves (its first address).
fn parse_listen_addr(text: &str) -> Result<SocketAddr, String> {
    if let Ok(addr) = text.parse() {
        return Ok(addr);
    }
    match text.to_socket_addrs() {
        Ok(mut addrs) => addrs
            .next()
            .ok_or_else(|| format!("{text} resolves to no address")),
        Err(e) => Err(format!("expected HOST:PORT, e.g. 127.0.0.1:9464 ({e})")),
    }
}

/// `--acl`: the ACL of the nodes zkr creates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum AclArg {
    /// world:anyone, all permissions
    Open,
    /// auth: all permissions for the authenticated creator only (needs --auth)
    Creator,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run CMD while holding the fair lock PATH (or a semaphore lease, or the simple lock)
    Lock(LockArgs),
    /// Run CMD while holding a read lock of the read/write lock PATH
    Read(RwArgs),
    /// Run CMD while holding the write lock of the read/write lock PATH
    Write(RwArgs),
    /// Campaign for leadership of PATH and run CMD while leader
    Elect(ElectArgs),
    /// Print the current leader's id of the election PATH (exit status 1 when there is none)
    Leader(LeaderArgs),
    /// List the holders and waiters of PATH, in queue order
    Holders(HoldersArgs),
    /// Run a private ZooKeeper server in the foreground and print its connect string
    Server(ServerArgs),
    /// Ask the holders of PATH (or one contender, --node) to let go, and wait until they have
    Revoke(RevokeArgs),
}

#[derive(Debug, Args)]
pub struct RevokeArgs {
    /// The lock, semaphore or election path
    pub path: String,

    /// Ask this contender (a node name under PATH, as `zkr holders` shows it) instead of every
    /// holder
    #[arg(long, value_name = "NAME")]
    pub node: Option<String>,

    /// Give up (exit 75) if they have not let go within DUR
    #[arg(long, value_name = "DUR", default_value = "30s", value_parser = duration::parse)]
    pub timeout: Duration,
}

/// How to wait for a lock, and how to stop CMD when it is lost.
#[derive(Debug, Args)]
pub struct WaitArgs {
    /// Give up (exit 75) if the lock is not acquired within DUR
    #[arg(long, value_name = "DUR", value_parser = duration::parse, conflicts_with = "try_lock")]
    pub timeout: Option<Duration>,

    /// Do not wait: exit 75 at once if the lock is busy
    #[arg(long = "try", id = "try_lock")]
    pub try_lock: bool,

    /// How long CMD has between SIGTERM (or the signal zkr got) and SIGKILL, whenever it is
    /// stopped: the lock was lost, or zkr got SIGTERM, SIGINT, SIGHUP or SIGQUIT
    #[arg(long, value_name = "DUR", default_value = "5s", value_parser = duration::parse)]
    pub grace: Duration,

    /// Let another process ask us to let go (`zkr revoke`): CMD then gets SIGTERM (SIGKILL
    /// after the grace), and the lock is released when it ends. Not with --simple
    #[arg(long)]
    pub revocable: bool,
}

#[derive(Debug, Args)]
pub struct LockArgs {
    /// The lock path (the directory of contender nodes; for --simple, the lock node). Several
    /// paths take several fair locks, all or none, in sorted order (no deadlock whatever order
    /// other callers give)
    #[arg(required = true, num_args = 1.., value_name = "PATH")]
    pub paths: Vec<String>,

    #[command(flatten)]
    pub wait: WaitArgs,

    /// Take one of N leases of a counting semaphore instead of the lock
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..), conflicts_with = "simple")]
    pub permits: Option<u32>,

    /// Use the simple exclusive-ephemeral lock (one node, no queue, no fairness)
    #[arg(long)]
    pub simple: bool,

    /// Node naming, to share the lock with Curator or kazoo clients [default: curator]
    #[arg(long, value_enum, conflicts_with_all = ["simple", "permits"])]
    pub layout: Option<Layout>,

    /// The command to run under the lock
    #[arg(last = true, required = true, value_name = "CMD")]
    pub cmd: Vec<OsString>,
}

#[derive(Debug, Args)]
pub struct RwArgs {
    /// The read/write lock path
    pub path: String,

    #[command(flatten)]
    pub wait: WaitArgs,

    /// Node naming, to share the lock with Curator or kazoo clients [default: curator]
    #[arg(long, value_enum)]
    pub layout: Option<Layout>,

    /// The command to run under the lock
    #[arg(last = true, required = true, value_name = "CMD")]
    pub cmd: Vec<OsString>,
}

#[derive(Debug, Args)]
pub struct ElectArgs {
    /// The election path
    pub path: String,

    /// This candidate's id, shown by `zkr leader` (and in ZK_LEADER_ID); not empty
    #[arg(long, value_parser = clap::builder::NonEmptyStringValueParser::new())]
    pub id: String,

    /// How long CMD has between SIGTERM (or the signal zkr got) and SIGKILL, whenever it is
    /// stopped: leadership was lost, or zkr got SIGTERM, SIGINT, SIGHUP or SIGQUIT
    #[arg(long, value_name = "DUR", default_value = "5s", value_parser = duration::parse)]
    pub grace: Duration,

    /// Let another process ask the leader to resign (`zkr revoke`): CMD then gets SIGTERM
    /// (SIGKILL after the grace), and leadership is given up when it ends
    #[arg(long)]
    pub revocable: bool,

    /// The command to run while leader
    #[arg(last = true, required = true, value_name = "CMD")]
    pub cmd: Vec<OsString>,
}

#[derive(Debug, Args)]
pub struct LeaderArgs {
    /// The election path
    pub path: String,

    /// Print one line per leader change until interrupted
    #[arg(long)]
    pub watch: bool,

    /// Print JSON (one object per line with --watch)
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct HoldersArgs {
    /// The lock, semaphore or election path
    pub path: String,

    /// Print JSON
    #[arg(long)]
    pub json: bool,

    /// The number of permits of a semaphore, to tell its holders from its waiters
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub permits: Option<u32>,
}

#[derive(Debug, Args)]
pub struct ServerArgs {
    /// The client port [default: a free port]
    #[arg(long, value_name = "P")]
    pub port: Option<u16>,

    /// Keep data, zoo.cfg and zookeeper.log in D [default: a temporary directory]
    #[arg(long, value_name = "D")]
    pub data_dir: Option<PathBuf>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn grammar_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn try_and_timeout_conflict() {
        let err = Cli::try_parse_from([
            "zkr",
            "lock",
            "/a",
            "--try",
            "--timeout",
            "1s",
            "--",
            "true",
        ])
        .unwrap_err();
        assert_eq!(err.exit_code(), 2);
    }

    #[test]
    fn cmd_needs_the_separator() {
        assert!(Cli::try_parse_from(["zkr", "lock", "/a", "true"]).is_err());
        let cli = Cli::try_parse_from(["zkr", "lock", "/a", "--", "sh", "-c", "echo --x"]).unwrap();
        let Command::Lock(args) = cli.command else {
            panic!("not lock")
        };
        assert_eq!(args.cmd, ["sh", "-c", "echo --x"]);
    }

    #[test]
    fn exit_codes_and_empty_ids() {
        let cli = Cli::try_parse_from([
            "zkr",
            "lock",
            "/a",
            "--conflict-exit-code",
            "0",
            "--lost-exit-code",
            "99",
            "--",
            "true",
        ])
        .unwrap();
        assert_eq!(cli.global.conflict_exit_code, 0);
        assert_eq!(cli.global.lost_exit_code, 99);
        let cli = Cli::try_parse_from(["zkr", "lock", "/a", "--", "true"]).unwrap();
        assert_eq!(
            (cli.global.conflict_exit_code, cli.global.lost_exit_code),
            (75, 76)
        );
        let err =
            Cli::try_parse_from(["zkr", "elect", "/a", "--id", "", "--", "true"]).unwrap_err();
        assert_eq!(err.exit_code(), 2);
        let err = Cli::try_parse_from([
            "zkr",
            "lock",
            "/a",
            "--conflict-exit-code",
            "256",
            "--",
            "true",
        ])
        .unwrap_err();
        assert_eq!(err.exit_code(), 2);
    }

    #[test]
    fn global_options_go_anywhere() {
        let cli = Cli::try_parse_from([
            "zkr",
            "holders",
            "/a",
            "--connect",
            "h:1",
            "--session-timeout",
            "2s",
        ])
        .unwrap();
        assert_eq!(cli.global.connect.as_deref(), Some("h:1"));
        assert_eq!(cli.global.session_timeout, Duration::from_secs(2));
    }
}
