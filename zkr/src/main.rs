//! `zkr`: ZooKeeper coordination recipes from the shell.
//!
//! ```text
//! zkr lock /jobs/nightly -- ./nightly.sh        # run under the fair lock
//! zkr elect /services/mailer --id "$(hostname)" -- ./mailer   # run while leader
//! zkr holders /jobs/nightly                     # who holds, who waits
//! ```
//!
//! # Exit status
//!
//! CMD's own status when it ran to the end under the lock (128+N if signal N ended it); 75
//! (`--conflict-exit-code`) when the lock was not acquired (`--try` found it busy,
//! `--timeout` passed); 76 (`--lost-exit-code`) when the lock or leadership was lost while
//! CMD ran; 69 when ZooKeeper cannot be reached within the connect timeout; 2 for usage
//! errors; 1 for anything else. A message on stderr says which.
//!
//! # Modules
//!
//! * [`cli`]: the argument grammar (clap).
//! * [`run`]: runs CMD in its own process group under a held lock and supervises it: loss,
//!   pauses of `zkr` itself, signals.
//! * [`supervise`]: the process between `zkr` and CMD (`zkr __supervise`): CMD never
//!   outlives `zkr`, and gets the terminal when `zkr` has it.
//! * [`wait`]: acquiring with progress on stderr.
//! * [`show`]: `holders` and `leader` (each contender's role comes from the library).
//! * [`server`]: `zkr server`, a private ZooKeeper through the test harness.

mod cli;
mod commands;
mod duration;
mod run;
mod server;
mod show;
mod signals;
mod supervise;
mod wait;

use clap::Parser;

use crate::cli::{Cli, Command};

/// Exit status: usage error (clap uses the same).
pub const EXIT_USAGE: i32 = 2;
/// Exit status: any error without a status of its own.
pub const EXIT_FAILURE: i32 = 1;
/// Exit status: ZooKeeper could not be reached within the connect timeout (EX_UNAVAILABLE).
pub const EXIT_UNREACHABLE: i32 = 69;
/// Exit status: the lock was not acquired: busy with `--try`, or `--timeout` passed
/// (EX_TEMPFAIL).
pub const EXIT_NOT_ACQUIRED: i32 = 75;
/// Exit status: the lock or leadership was lost while CMD ran (EX_PROTOCOL).
pub const EXIT_LOST: i32 = 76;

/// A failure that ends `zkr`: the status to exit with and the message for stderr.
#[derive(Debug)]
pub struct Fail {
    pub code: i32,
    pub message: String,
}

impl Fail {
    pub fn new(code: i32, message: impl Into<String>) -> Fail {
        Fail {
            code,
            message: message.into(),
        }
    }

    pub fn usage(message: impl Into<String>) -> Fail {
        Fail::new(EXIT_USAGE, message)
    }

    /// Maps a library error to the documented status, in zkr's words where the library's
    /// would name its own API.
    pub fn from_error(context: &str, err: zk_recipes::Error) -> Fail {
        use zk_recipes::Error as E;
        let code = match &err {
            E::InvalidPath { .. }
            | E::InvalidArgument(_)
            | E::Unsupported(_)
            | E::PathInUse { .. } => EXIT_USAGE,
            E::Unreachable { .. } => EXIT_UNREACHABLE,
            E::Timeout | E::WouldBlock => EXIT_NOT_ACQUIRED,
            E::LockLost(_) => EXIT_LOST,
            _ => EXIT_FAILURE,
        };
        let text = match &err {
            E::NoAuth { path } => format!(
                "no permission for {path}: its ACL does not let this session in; give --auth digest:USER:PASSWORD (or ZK_AUTH, --auth-file) of a user it allows"
            ),
            E::ZooKeeper {
                source: zk_recipes::zk::Error::NoAuth,
                path,
                ..
            } => format!(
                "no permission for {path}: its ACL does not let this session in; give --auth digest:USER:PASSWORD (or ZK_AUTH, --auth-file) of a user it allows"
            ),
            _ => err.to_string(),
        };
        if context.is_empty() {
            Fail::new(code, text)
        } else {
            Fail::new(code, format!("{context}: {text}"))
        }
    }
}

/// What a command ends with: an exit status, or a failure with a message.
pub type Outcome = Result<i32, Fail>;

/// Whether stderr is a terminal (colours, the live waiting line).
pub fn stderr_is_terminal() -> bool {
    std::io::IsTerminal::is_terminal(&std::io::stderr())
}

/// The log filter when neither ZKR_LOG nor RUST_LOG is set: warnings (a reconnect, a
/// suspended or expired session), without the ZooKeeper client's own retry chatter.
const DEFAULT_LOG: &str = "warn,zookeeper_client=error";

/// Logs to stderr: ZKR_LOG if set, else RUST_LOG, else [`DEFAULT_LOG`]; colours only on a
/// terminal.
fn init_tracing() {
    use tracing_subscriber::EnvFilter;
    let filter = ["ZKR_LOG", "RUST_LOG"]
        .iter()
        .filter_map(|var| std::env::var(var).ok().filter(|v| !v.trim().is_empty()))
        .find_map(|spec| EnvFilter::try_new(spec).ok())
        .unwrap_or_else(|| EnvFilter::new(DEFAULT_LOG));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(stderr_is_terminal())
        .with_writer(std::io::stderr)
        .try_init();
}

/// `--metrics-addr`: installs the Prometheus recorder for the library's `metrics` and serves
/// them over HTTP on `addr` from a thread of its own, until zkr exits.
fn serve_metrics(addr: std::net::SocketAddr) -> Result<(), Fail> {
    metrics_exporter_prometheus::PrometheusBuilder::new()
        .with_http_listener(addr)
        .install()
        .map_err(|e| Fail::new(EXIT_FAILURE, format!("--metrics-addr {addr}: {e}")))
}

fn main() {
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if args.get(1).is_some_and(|a| a == supervise::SUBCOMMAND) {
        supervise::main(&args[2..]);
    }
    let cli = Cli::parse();
    init_tracing();
    if let Some(addr) = cli.global.metrics_addr {
        if let Err(fail) = serve_metrics(addr) {
            eprintln!("zkr: {}", fail.message);
            std::process::exit(fail.code);
        }
    }
    let (conflict_code, lost_code) = (
        i32::from(cli.global.conflict_exit_code),
        i32::from(cli.global.lost_exit_code),
    );
    let outcome = match cli.command {
        Command::Server(ref args) => server::run(args),
        _ => {
            let runtime = match tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()
            {
                Ok(rt) => rt,
                Err(e) => {
                    eprintln!("zkr: cannot start the async runtime: {e}");
                    std::process::exit(EXIT_FAILURE);
                }
            };
            let outcome = runtime.block_on(commands::run(cli));
            // Everything that matters (releases, closing the session) was awaited; do not wait
            // for background tasks (a session reconnecting after a loss, say).
            runtime.shutdown_background();
            outcome
        }
    };
    let code = match outcome {
        Ok(code) => code,
        Err(fail) => {
            // Only zkr's own statuses: CMD's are passed on as they are.
            let code = match fail.code {
                EXIT_NOT_ACQUIRED => conflict_code,
                EXIT_LOST => lost_code,
                code => code,
            };
            if fail.code == EXIT_LOST {
                // The status it exits with, as renumbered: the message used to say 76.
                eprintln!("zkr: {}; exiting {code}", fail.message);
            } else {
                eprintln!("zkr: {}", fail.message);
            }
            code
        }
    };
    std::process::exit(code);
}
