//! The commands that talk to ZooKeeper: connect, dispatch, close.

use std::future::Future;
use std::pin::Pin;
use std::time::{Duration, Instant};

use zk_recipes::{
    validate_path, Election, Error, ExclusiveLock, FairLock, LockGuard, NodeKind, RwLock,
    Semaphore, Session,
};

use crate::cli::{Cli, Command, ElectArgs, Global, LockArgs, RwArgs, WaitArgs};
use crate::duration::human;
use crate::run::{self, Held, RunSpec};
use crate::show::{self, own_identity};
use crate::signals::{self, Signals};
use crate::wait::{self, Progress};
use crate::{Fail, Outcome, EXIT_FAILURE, EXIT_NOT_ACQUIRED, EXIT_UNREACHABLE};

/// Node kinds of a lock directory (Curator and kazoo locks and read/write nodes).
pub const LOCK_KINDS: &[NodeKind] = &[NodeKind::Lock, NodeKind::Read, NodeKind::Write];
/// Node kinds of a semaphore.
pub const LEASE_KINDS: &[NodeKind] = &[NodeKind::Lease];

type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Runs one command that needs a session. Usage errors are found before connecting.
pub async fn run(cli: Cli) -> Outcome {
    let mut signals = Signals::install()
        .map_err(|e| Fail::new(EXIT_FAILURE, format!("cannot install signal handlers: {e}")))?;
    let path = match &cli.command {
        Command::Lock(a) => &a.path,
        Command::Read(a) | Command::Write(a) => &a.path,
        Command::Elect(a) => &a.path,
        Command::Leader(a) => &a.path,
        Command::Holders(a) => &a.path,
        Command::Server(_) => unreachable!("zkr server runs without a session"),
    };
    validate_path(path).map_err(|e| Fail::from_error("", e))?;
    let session = connect(&cli.global, &mut signals).await?;
    let outcome = match &cli.command {
        Command::Lock(a) => lock(&session, &cli.global, a, &mut signals).await,
        Command::Holders(a) => show::holders(&session, a).await,
        Command::Read(a) => rw(&session, &cli.global, a, false, &mut signals).await,
        Command::Write(a) => rw(&session, &cli.global, a, true, &mut signals).await,
        Command::Elect(a) => elect(&session, &cli.global, a, &mut signals).await,
        Command::Leader(a) => show::leader(&session, a, &mut signals).await,
        Command::Server(_) => unreachable!(),
    };
    // After a loss there is nothing left to release: exit at once (the session's end on the
    // server removes whatever is left), so that `zkr` is gone before the next holder starts.
    if matches!(&outcome, Err(fail) if fail.code == crate::EXIT_LOST) {
        return outcome;
    }
    let close_within = cli.global.session_timeout + Duration::from_secs(1);
    let _ = tokio::time::timeout(close_within, session.close()).await;
    outcome
}

/// Splits `host:port,host:port/chroot` into hosts and chroot.
fn split_connect(raw: &str) -> (&str, Option<&str>) {
    match raw.find('/') {
        Some(i) => (&raw[..i], Some(&raw[i..])),
        None => (raw, None),
    }
}

/// Connects, or fails with 2 (no address, bad options), 69 (unreachable) or 128+N (a signal).
pub async fn connect(g: &Global, signals: &mut Signals) -> Result<Session, Fail> {
    let raw = g
        .connect
        .as_deref()
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .ok_or_else(|| {
            Fail::usage(
                "no ZooKeeper to connect to: give --connect HOST:PORT[,HOST:PORT...] or set ZK_CONNECT",
            )
        })?;
    let (hosts, chroot_suffix) = split_connect(raw);
    let chroot = match (chroot_suffix, g.chroot.as_deref()) {
        (Some(a), Some(b)) if a != b => {
            return Err(Fail::usage(format!(
                "two chroots: {a:?} in --connect/ZK_CONNECT and {b:?} in --chroot; give one"
            )))
        }
        (a, b) => a.or(b),
    };
    let connect_timeout = g.connect_timeout.unwrap_or(g.session_timeout);
    let mut builder = Session::builder(hosts)
        .with_session_timeout(g.session_timeout)
        .with_connect_timeout(connect_timeout)
        .with_loss_policy(g.loss_policy.to_loss_policy());
    if let Some(chroot) = chroot {
        builder = builder.with_chroot(chroot);
    }
    // The library bounds connecting by the connect timeout; this bound is a safety net.
    let bounded = tokio::time::timeout(connect_timeout + Duration::from_secs(2), builder.connect());
    let result = tokio::select! {
        r = bounded => r,
        sig = signals.recv_stop() => {
            return Err(Fail::new(128 + sig, format!("{} while connecting to ZooKeeper", signals::name(sig))))
        }
    };
    let unreachable = || {
        Fail::new(
            EXIT_UNREACHABLE,
            format!(
                "cannot reach ZooKeeper at {hosts} within {}: check that it is running and the address is right (--connect, ZK_CONNECT, --connect-timeout)",
                human(connect_timeout)
            ),
        )
    };
    match result {
        Err(_) | Ok(Err(Error::Unreachable { .. })) => Err(unreachable()),
        Ok(Ok(session)) => Ok(session),
        Ok(Err(Error::InvalidPath { path, reason })) => Err(Fail::usage(format!(
            "bad chroot {path:?}: {reason} (--chroot, or the /suffix of --connect)"
        ))),
        Ok(Err(e)) => Err(Fail::from_error("cannot connect to ZooKeeper", e)),
    }
}

/// How an acquire waits.
#[derive(Debug, Clone, Copy)]
pub enum Mode {
    Wait,
    Try,
    Timeout(Duration),
}

impl Mode {
    pub fn of(wait: &WaitArgs) -> Mode {
        match (wait.try_lock, wait.timeout) {
            (true, _) => Mode::Try,
            (false, Some(d)) => Mode::Timeout(d),
            (false, None) => Mode::Wait,
        }
    }
}

/// Boxes the acquire future of `$lock` for `$mode`: `$wait()`, `$try()` or `$timeout(d)`.
macro_rules! acquire_future {
    ($mode:expr, $lock:expr, $wait:ident, $try:ident, $timeout:ident) => {{
        let lock = $lock;
        let future: BoxFuture<'_, _> = match $mode {
            Mode::Wait => Box::pin(async move { lock.$wait().await }),
            Mode::Try => Box::pin(async move { lock.$try().await }),
            Mode::Timeout(d) => Box::pin(async move { lock.$timeout(d).await }),
        };
        future
    }};
}

/// Turns the end of a wait into the guard, or the documented failure.
pub fn acquired<G>(
    result: Result<zk_recipes::Result<G>, i32>,
    path: &str,
    wait: Option<&WaitArgs>,
    busy_note: String,
) -> Result<G, Fail> {
    match result {
        Ok(Ok(guard)) => Ok(guard),
        Err(sig) => Err(Fail::new(
            128 + sig,
            format!(
                "{} while waiting for {path}; nothing is held",
                signals::name(sig)
            ),
        )),
        Ok(Err(Error::WouldBlock)) => Err(Fail::new(
            EXIT_NOT_ACQUIRED,
            format!("{path} is busy{busy_note}; --try does not wait"),
        )),
        Ok(Err(Error::Timeout)) => {
            let after = wait
                .and_then(|w| w.timeout)
                .map(|d| format!(" after {}", human(d)))
                .unwrap_or_default();
            Err(Fail::new(
                EXIT_NOT_ACQUIRED,
                format!("timed out{after} waiting for {path}{busy_note}; nothing is held"),
            ))
        }
        Ok(Err(e)) => Err(Fail::from_error(&format!("cannot take {path}"), e)),
    }
}

/// `zkr lock PATH [--timeout DUR | --try] [--permits N] [--simple] [--layout L] -- CMD`.
async fn lock(session: &Session, g: &Global, a: &LockArgs, signals: &mut Signals) -> Outcome {
    let path = a.path.as_str();
    let identity = own_identity();
    let bad = |e| Fail::from_error("", e);
    let mode = Mode::of(&a.wait);
    let (future, progress): (BoxFuture<'_, zk_recipes::Result<LockGuard>>, Progress) = if a.simple {
        let lock = ExclusiveLock::new(session, path)
            .map_err(bad)?
            .with_data(identity.into_bytes());
        let progress = Progress::simple(session, path, lock.clone());
        let future = acquire_future!(mode, lock, lock, try_lock, lock_timeout);
        (future, progress)
    } else if let Some(permits) = a.permits {
        let permits = permits as usize;
        let sem = Semaphore::new(session, path, permits)
            .map_err(bad)?
            .with_data(identity.into_bytes());
        let progress = Progress::queue(session, path, LEASE_KINDS, Some(permits));
        let future = acquire_future!(mode, sem, acquire, try_acquire, acquire_timeout);
        (future, progress)
    } else {
        let mut lock = FairLock::new(session, path)
            .map_err(bad)?
            .with_data(identity.into_bytes());
        if let Some(layout) = a.layout {
            lock = lock.with_layout(layout.to_layout());
        }
        let progress = Progress::queue(session, path, LOCK_KINDS, None);
        let future = acquire_future!(mode, lock, lock, try_lock, lock_timeout);
        (future, progress)
    };
    let result = wait::acquire(future, &progress, signals, a.wait.try_lock).await;
    let note = busy_note(&result, &progress).await;
    let guard = acquired(result, path, Some(&a.wait), note)?;
    let spec = RunSpec {
        path: path.to_string(),
        cmd: a.cmd.clone(),
        grace: a.wait.grace,
        session: session.clone(),
        acquired_at: Instant::now(),
        env: Vec::new(),
    };
    run::run(Held::Lock(guard), spec, signals).await
}

/// `zkr read|write PATH [--timeout DUR | --try] [--layout L] -- CMD`.
async fn rw(
    session: &Session,
    g: &Global,
    a: &RwArgs,
    write: bool,
    signals: &mut Signals,
) -> Outcome {
    let path = a.path.as_str();
    let mut lock = RwLock::new(session, path)
        .map_err(|e| Fail::from_error("", e))?
        .with_data(own_identity().into_bytes());
    if let Some(layout) = a.layout {
        lock = lock.with_layout(layout.to_layout());
    }
    let progress = Progress::queue(session, path, LOCK_KINDS, None);
    let mode = Mode::of(&a.wait);
    let held = if write {
        let future = acquire_future!(mode, lock, write, try_write, write_timeout);
        let result = wait::acquire(future, &progress, signals, a.wait.try_lock).await;
        let note = busy_note(&result, &progress).await;
        Held::Write(acquired(result, path, Some(&a.wait), note)?)
    } else {
        let future = acquire_future!(mode, lock, read, try_read, read_timeout);
        let result = wait::acquire(future, &progress, signals, a.wait.try_lock).await;
        let note = busy_note(&result, &progress).await;
        Held::Read(acquired(result, path, Some(&a.wait), note)?)
    };
    let spec = RunSpec {
        path: path.to_string(),
        cmd: a.cmd.clone(),
        grace: a.wait.grace,
        session: session.clone(),
        acquired_at: Instant::now(),
        env: Vec::new(),
    };
    run::run(held, spec, signals).await
}

/// `zkr elect PATH --id ID -- CMD`.
async fn elect(session: &Session, g: &Global, a: &ElectArgs, signals: &mut Signals) -> Outcome {
    let path = a.path.as_str();
    let election =
        Election::new(session, path, a.id.clone()).map_err(|e| Fail::from_error("", e))?;
    let progress = Progress::election(session, path);
    let future = Box::pin(async move { election.campaign().await });
    let result = wait::acquire(future, &progress, signals, false).await;
    let leadership = acquired(result, path, None, String::new())?;
    let spec = RunSpec {
        path: path.to_string(),
        cmd: a.cmd.clone(),
        grace: a.grace,
        session: session.clone(),
        acquired_at: Instant::now(),
        env: vec![("ZK_LEADER_ID".to_string(), a.id.clone())],
    };
    run::run(Held::Leader(leadership), spec, signals).await
}

/// Who holds, for the message of a `--try` refusal or a timeout.
async fn busy_note<G>(result: &Result<zk_recipes::Result<G>, i32>, progress: &Progress) -> String {
    match result {
        Ok(Err(Error::WouldBlock | Error::Timeout)) => progress.holder_note().await,
        _ => String::new(),
    }
}
