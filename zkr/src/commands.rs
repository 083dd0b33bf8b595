//! The commands that talk to ZooKeeper: connect, dispatch, close.

use std::future::Future;
use std::pin::Pin;
use std::time::{Duration, Instant};

use zk_recipes::{
    validate_path, Election, Error, ExclusiveLock, FairLock, LockGuard, MultiLock, NodeKind,
    Revocation, RwLock, Semaphore, Session, SessionBuilder,
};

use crate::cli::{AclArg, Cli, Command, ElectArgs, Global, LockArgs, RevokeArgs, RwArgs, WaitArgs};
use crate::duration::human;
use crate::run::{self, Held, RunSpec};
use crate::show::{self, own_identity};
use crate::signals::{self, Signals};
use crate::wait::{self, Progress};
use crate::{Fail, Outcome, EXIT_FAILURE, EXIT_NOT_ACQUIRED, EXIT_UNREACHABLE, EXIT_USAGE};

/// Node kinds of a lock directory (Curator and kazoo locks and read/write nodes).
pub const LOCK_KINDS: &[NodeKind] = &[NodeKind::Lock, NodeKind::Read, NodeKind::Write];
/// Node kinds of a semaphore.
pub const LEASE_KINDS: &[NodeKind] = &[NodeKind::Lease];

type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Runs one command that needs a session. Usage errors are found before connecting.
pub async fn run(cli: Cli) -> Outcome {
    let mut signals = Signals::install()
        .map_err(|e| Fail::new(EXIT_FAILURE, format!("cannot install signal handlers: {e}")))?;
    if let Command::Lock(a) = &cli.command {
        for path in &a.paths {
            validate_path(path).map_err(|e| Fail::from_error("", e))?;
        }
        if a.simple && a.wait.revocable {
            return Err(Fail::new(
                EXIT_USAGE,
                "the simple lock cannot be revoked: --revocable takes a fair lock or a semaphore",
            ));
        }
        if a.paths.len() > 1 && (a.simple || a.permits.is_some()) {
            return Err(Fail::new(
                EXIT_USAGE,
                "several paths take fair locks: --simple and --permits take one path",
            ));
        }
    }
    let path = match &cli.command {
        Command::Lock(a) => &a.paths[0],
        Command::Read(a) | Command::Write(a) => &a.path,
        Command::Elect(a) => &a.path,
        Command::Leader(a) => &a.path,
        Command::Holders(a) => &a.path,
        Command::Revoke(a) => &a.path,
        Command::Server(_) => unreachable!("zkr server runs without a session"),
    };
    validate_path(path).map_err(|e| Fail::from_error("", e))?;
    // The paths a recipe will write under (`holders` and `leader` only read): ZooKeeper's
    // reserved tree is refused here, before connecting, so that the answer is the usage
    // error's 2 whether or not the server is reachable.
    let written: &[String] = match &cli.command {
        Command::Lock(a) => &a.paths,
        Command::Read(a) | Command::Write(a) => std::slice::from_ref(&a.path),
        Command::Elect(a) => std::slice::from_ref(&a.path),
        Command::Revoke(a) => std::slice::from_ref(&a.path),
        Command::Holders(_) | Command::Leader(_) | Command::Server(_) => &[],
    };
    let session = connect(&cli.global, written, &mut signals).await?;
    let outcome = match &cli.command {
        Command::Lock(a) => lock(&session, &cli.global, a, &mut signals).await,
        Command::Holders(a) => show::holders(&session, a).await,
        Command::Revoke(a) => revoke(&session, a, &mut signals).await,
        Command::Read(a) => rw(&session, &cli.global, a, false, &mut signals).await,
        Command::Write(a) => rw(&session, &cli.global, a, true, &mut signals).await,
        Command::Elect(a) => elect(&session, &cli.global, a, &mut signals).await,
        Command::Leader(a) => show::leader(&session, a, &mut signals).await,
        Command::Server(_) => unreachable!(),
    };
    // After a loss CMD is stopped already. Cut off, exit at once: the session's end on the
    // server removes whatever is left, and `zkr` is gone before the next holder starts. Still
    // connected (a node deleted by an administrator, a multi-lock that lost one of its locks),
    // close the session first, briefly: the other locks of a multi-lock were held for the
    // session timeout by a `zkr` that had exited.
    if matches!(&outcome, Err(fail) if fail.code == crate::EXIT_LOST) {
        if session.is_connected() {
            let _ = tokio::time::timeout(Duration::from_secs(1), session.close()).await;
        }
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

/// ZooKeeper's client port, when `--connect` names a host without one (as zkCli, Curator
/// and kazoo do).
pub const DEFAULT_PORT: u16 = 2181;

/// Checks `host[:port][,host[:port]...]` (IPv6 as `[addr]:port`) and fills in port 2181.
/// The error is the user's own words: which entry, and what is wrong with it.
pub fn normalize_hosts(hosts: &str) -> Result<String, String> {
    let form = "give host[:port][,host[:port]...][/chroot], e.g. zk1:2181,zk2:2181/app";
    let mut out = Vec::new();
    for entry in hosts.split(',') {
        let entry = entry.trim();
        if entry.is_empty() {
            return Err(format!("{hosts:?} has an empty server entry: {form}"));
        }
        let (host, port) = if let Some(rest) = entry.strip_prefix('[') {
            let (addr, after) = rest
                .split_once(']')
                .ok_or_else(|| format!("{entry:?} opens '[' but never closes it: {form}"))?;
            match after {
                "" => (format!("[{addr}]"), None),
                _ => match after.strip_prefix(':') {
                    Some(port) => (format!("[{addr}]"), Some(port)),
                    None => return Err(format!("{entry:?}: expected ':port' after ']': {form}")),
                },
            }
        } else {
            match entry.split_once(':') {
                Some((h, p)) if !p.contains(':') => (h.to_string(), Some(p)),
                Some(_) => {
                    return Err(format!(
                        "{entry:?} has more than one ':' (write an IPv6 address as [addr]:port): {form}"
                    ))
                }
                None => (entry.to_string(), None),
            }
        };
        if host.is_empty() || host == "[]" {
            return Err(format!("{entry:?} has no host name: {form}"));
        }
        if let Some(bad) = host.chars().find(|c| c.is_whitespace()) {
            return Err(format!("{entry:?} has a {bad:?} in the host name: {form}"));
        }
        let port = match port {
            None => DEFAULT_PORT,
            Some(p) => p.parse::<u16>().ok().filter(|p| *p > 0).ok_or_else(|| {
                format!("{entry:?}: {p:?} is not a port number (1-65535): {form}")
            })?,
        };
        out.push(format!("{host}:{port}"));
    }
    Ok(out.join(","))
}

/// Parses `digest:USER:PASSWORD` (the password may contain ':'). `source` names where it
/// came from, for the message.
pub fn parse_auth(text: &str, source: &str) -> Result<(String, String), Fail> {
    let text = text.trim_end_matches(['\n', '\r']);
    let bad = |why: &str| {
        Fail::usage(format!(
            "{source}: {why}: give digest:USER:PASSWORD (ZooKeeper's digest scheme)"
        ))
    };
    let (scheme, rest) = text.split_once(':').ok_or_else(|| bad("no scheme"))?;
    if scheme != "digest" {
        return Err(bad(&format!("unsupported scheme {scheme:?}")));
    }
    let (user, password) = rest
        .split_once(':')
        .ok_or_else(|| bad("no ':' between user and password"))?;
    if user.is_empty() {
        return Err(bad("the user is empty"));
    }
    Ok((user.to_string(), password.to_string()))
}

/// The credentials of `--auth`, `ZK_AUTH` or `--auth-file`.
fn credentials(g: &Global) -> Result<Option<(String, String)>, Fail> {
    if let Some(file) = &g.auth_file {
        let text = std::fs::read_to_string(file).map_err(|e| {
            Fail::usage(format!(
                "--auth-file {}: cannot read it: {e}",
                file.display()
            ))
        })?;
        let line = text.lines().next().unwrap_or_default();
        return parse_auth(line, &format!("--auth-file {}", file.display())).map(Some);
    }
    match &g.auth {
        Some(text) if !text.is_empty() => parse_auth(text, "--auth (or ZK_AUTH)").map(Some),
        _ => Ok(None),
    }
}

/// The ACL of the nodes zkr creates (`--acl`).
pub fn acls(g: &Global) -> Result<Vec<zk_recipes::zk::Acl>, Fail> {
    use zk_recipes::zk::Acls;
    match g.acl {
        AclArg::Open => Ok(Acls::anyone_all().to_vec()),
        AclArg::Creator if g.auth.is_none() && g.auth_file.is_none() => Err(Fail::usage(
            "--acl creator gives the nodes to the authenticated user: give --auth, ZK_AUTH or --auth-file too",
        )),
        AclArg::Creator => Ok(Acls::creator_all().to_vec()),
    }
}

/// Applies `--tls-ca`, `--tls-cert`, `--tls-key`.
#[cfg(feature = "tls")]
fn with_tls(g: &Global, builder: SessionBuilder) -> Result<SessionBuilder, Fail> {
    let Some(ca) = &g.tls_ca else {
        return Ok(builder);
    };
    let read = |flag: &str, file: &std::path::Path| {
        std::fs::read_to_string(file)
            .map_err(|e| Fail::usage(format!("{flag} {}: cannot read it: {e}", file.display())))
    };
    let pem = read("--tls-ca", ca)?;
    let mut options = zk_recipes::zk::TlsOptions::new()
        .with_pem_ca(&pem)
        .map_err(|e| {
            Fail::usage(format!(
                "--tls-ca {}: not a PEM certificate: {e}",
                ca.display()
            ))
        })?;
    if let (Some(cert), Some(key)) = (&g.tls_cert, &g.tls_key) {
        let (cert_pem, key_pem) = (read("--tls-cert", cert)?, read("--tls-key", key)?);
        options = options
            .with_pem_identity(&cert_pem, &key_pem)
            .map_err(|e| {
                Fail::usage(format!(
                    "--tls-cert {} / --tls-key {}: not a PEM certificate and its key: {e}",
                    cert.display(),
                    key.display()
                ))
            })?;
    }
    Ok(builder.with_tls(options))
}

#[cfg(not(feature = "tls"))]
fn with_tls(g: &Global, builder: SessionBuilder) -> Result<SessionBuilder, Fail> {
    if g.tls_ca.is_some() || g.tls_cert.is_some() {
        return Err(Fail::usage(
            "this zkr was built without TLS: install it with `cargo install --locked --path zkr --features tls`",
        ));
    }
    Ok(builder)
}

/// Resolves every host. All failing is fatal (69, saying it is DNS); some failing is a
/// warning.
async fn resolve(hosts: &str) -> Result<Vec<std::net::SocketAddr>, Fail> {
    let mut addrs = Vec::new();
    let mut failures = Vec::new();
    for entry in hosts.split(',') {
        let lookup = tokio::time::timeout(Duration::from_secs(5), tokio::net::lookup_host(entry));
        match lookup.await {
            Ok(Ok(found)) => addrs.extend(found),
            Ok(Err(e)) => failures.push(format!("{entry}: {e}")),
            Err(_) => failures.push(format!("{entry}: no DNS answer within 5s")),
        }
    }
    if addrs.is_empty() {
        return Err(Fail::new(
            EXIT_UNREACHABLE,
            format!(
                "cannot resolve the ZooKeeper host name{} (DNS): {}",
                if failures.len() > 1 { "s" } else { "" },
                failures.join("; ")
            ),
        ));
    }
    for failure in failures {
        eprintln!("zkr: warning: cannot resolve {failure} (DNS); trying the other servers");
    }
    Ok(addrs)
}

/// Why each address did not give a session, for the "unreachable" message.
async fn diagnose(addrs: &[std::net::SocketAddr]) -> String {
    let probes = addrs.iter().map(|addr| async move {
        let connect = tokio::net::TcpStream::connect(addr);
        match tokio::time::timeout(Duration::from_secs(1), connect).await {
            Ok(Ok(_)) => format!(
                "{addr} accepts connections but gave no session (a TLS port without --tls-ca, or a plain port with it?)"
            ),
            Ok(Err(e)) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
                format!("connection refused by {addr}")
            }
            Ok(Err(e)) => format!("{addr}: {e}"),
            Err(_) => format!("no answer from {addr} within 1s"),
        }
    });
    futures::future::join_all(probes).await.join("; ")
}

/// Connects, or fails with 2 (no address, bad options), 69 (unreachable) or 128+N (a signal).
/// Connects as `g` says, after checking that each of `recipe_paths` may hold a recipe in
/// that session (its chroot joined): a usage error (2) before anything is sent.
pub async fn connect(
    g: &Global,
    recipe_paths: &[String],
    signals: &mut Signals,
) -> Result<Session, Fail> {
    let raw = g
        .connect
        .as_deref()
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .ok_or_else(|| {
            Fail::usage(
                "no ZooKeeper to connect to: give --connect HOST[:PORT][,HOST[:PORT]...] or set ZK_CONNECT",
            )
        })?;
    let (hosts, chroot_suffix) = split_connect(raw);
    let hosts = normalize_hosts(hosts)
        .map_err(|e| Fail::usage(format!("bad --connect/ZK_CONNECT: {e}")))?;
    let chroot = match (chroot_suffix, g.chroot.as_deref()) {
        (Some(a), Some(b)) if a != b => {
            return Err(Fail::usage(format!(
                "two chroots: {a:?} in --connect/ZK_CONNECT and {b:?} in --chroot; give one"
            )))
        }
        (a, b) => a.or(b),
    };
    let connect_timeout = g.connect_timeout.unwrap_or(g.session_timeout);
    let mut builder = Session::builder(hosts.as_str())
        .with_session_timeout(g.session_timeout)
        .with_connect_timeout(connect_timeout)
        .with_loss_policy(g.loss_policy);
    if let Some(chroot) = chroot {
        builder = builder.with_chroot(chroot);
    }
    for path in recipe_paths {
        builder
            .check_recipe_path(path)
            .map_err(|e| Fail::from_error("", e))?;
    }
    if let Some((user, password)) = credentials(g)? {
        builder = builder.with_digest_auth(user, password);
    }
    acls(g)?;
    builder = with_tls(g, builder)?;
    let started = Instant::now();
    let connecting = async {
        let addrs = resolve(&hosts).await?;
        // The library bounds connecting by the connect timeout; this bound is a safety net.
        let bound = connect_timeout + Duration::from_secs(2);
        match tokio::time::timeout(bound, builder.connect()).await {
            Ok(Ok(session)) => Ok(session),
            Err(_) | Ok(Err(Error::Unreachable { .. })) => Err(Fail::new(
                EXIT_UNREACHABLE,
                format!(
                    "cannot reach ZooKeeper at {hosts} within {} ({}): check that it is running and the address is right (--connect, ZK_CONNECT, --connect-timeout)",
                    human(started.elapsed().min(connect_timeout)),
                    diagnose(&addrs).await
                ),
            )),
            Ok(Err(Error::InvalidPath { path, reason })) => Err(Fail::usage(format!(
                "bad chroot {path:?}: {reason} (--chroot, or the /suffix of --connect)"
            ))),
            Ok(Err(Error::ZooKeeper {
                source: zk_recipes::zk::Error::AuthFailed,
                ..
            })) => Err(Fail::new(
                EXIT_FAILURE,
                "ZooKeeper refused the credentials of --auth (or ZK_AUTH, --auth-file)",
            )),
            Ok(Err(e)) => Err(Fail::from_error("cannot connect to ZooKeeper", e)),
        }
    };
    let session = tokio::select! {
        r = connecting => r?,
        sig = signals.recv_stop() => {
            return Err(Fail::new(128 + sig, format!("{} while connecting to ZooKeeper", signals::name(sig))))
        }
    };
    let granted = session.session_timeout();
    if granted != g.session_timeout {
        eprintln!(
            "zkr: warning: ZooKeeper granted a session timeout of {} instead of the {} asked for (--session-timeout): zkr uses {} (its limits are minSessionTimeout..maxSessionTimeout, 2..20 ticks by default)",
            human(granted),
            human(g.session_timeout),
            human(granted)
        );
    }
    Ok(session)
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
    if a.paths.len() > 1 {
        return multi_lock(session, g, a, signals).await;
    }
    let path = a.paths[0].as_str();
    let identity = own_identity();
    let bad = |e| Fail::from_error("", e);
    let mode = Mode::of(&a.wait);
    let (future, progress): (BoxFuture<'_, zk_recipes::Result<LockGuard>>, Progress) = if a.simple {
        let lock = ExclusiveLock::new(session, path)
            .map_err(bad)?
            .with_data(identity.into_bytes())
            .with_acls(&acls(g)?);
        let progress = Progress::simple(session, path, lock.clone());
        let future = acquire_future!(mode, lock, lock, try_lock, lock_timeout);
        (future, progress)
    } else if let Some(permits) = a.permits {
        let permits = permits as usize;
        let sem = Semaphore::new(session, path, permits)
            .map_err(bad)?
            .with_data(identity.into_bytes())
            .with_acls(&acls(g)?)
            .with_revocable(a.wait.revocable);
        let progress = Progress::queue(session, path, LEASE_KINDS, Some(permits));
        let future = acquire_future!(mode, sem, acquire, try_acquire, acquire_timeout);
        (future, progress)
    } else {
        let mut lock = FairLock::new(session, path)
            .map_err(bad)?
            .with_data(identity.into_bytes())
            .with_acls(&acls(g)?)
            .with_revocable(a.wait.revocable);
        if let Some(layout) = a.layout {
            lock = lock.with_layout(layout);
        }
        let progress = Progress::queue(session, path, LOCK_KINDS, None);
        let future = acquire_future!(mode, lock, lock, try_lock, lock_timeout);
        (future, progress)
    };
    let result = wait::acquire(future, &progress, signals, a.wait.try_lock).await;
    let note = busy_note(&result, &progress).await;
    let guard = acquired(result, path, Some(&a.wait), note)?;
    let spec = RunSpec::new(path.to_string(), &a.cmd, a.wait.grace, session);
    run::run(Held::new(guard, "the lock"), spec, signals).await
}

/// `zkr lock PATH PATH... [--timeout DUR | --try] [--layout L] -- CMD`: fair locks on every
/// path, all or none, taken in sorted order under one deadline.
async fn multi_lock(session: &Session, g: &Global, a: &LockArgs, signals: &mut Signals) -> Outcome {
    let bad = |e| Fail::from_error("", e);
    let mut locks = MultiLock::new(session, &a.paths)
        .map_err(bad)?
        .with_data(own_identity().into_bytes())
        .with_acls(&acls(g)?)
        .with_revocable(a.wait.revocable);
    if let Some(layout) = a.layout {
        locks = locks.with_layout(layout);
    }
    let paths: Vec<String> = locks.paths().iter().map(|p| p.to_string()).collect();
    let described = paths.join(" ");
    let progress = Progress::multi(session, &paths, LOCK_KINDS);
    let future = acquire_future!(Mode::of(&a.wait), locks, lock, try_lock, lock_timeout);
    let result = wait::acquire(future, &progress, signals, a.wait.try_lock).await;
    let note = busy_note(&result, &progress).await;
    let held = acquired(result, &described, Some(&a.wait), note)?;
    let spec = RunSpec::new(paths[0].clone(), &a.cmd, a.wait.grace, session);
    run::run(Held::multi(held, "the locks"), spec, signals).await
}

/// `zkr revoke PATH [--node NAME] [--timeout DUR]`: asks the holders (or one contender) to
/// let go, then waits until their nodes are gone. Our request nodes are ephemeral in this
/// session, so they go when zkr exits.
async fn revoke(session: &Session, a: &RevokeArgs, signals: &mut Signals) -> Outcome {
    let path = a.path.as_str();
    let asked = match &a.node {
        Some(node) => vec![zk_recipes::revoke(session, path, node)
            .await
            .map_err(|e| Fail::from_error(&format!("cannot revoke {node} of {path}"), e))?],
        None => zk_recipes::revoke_holders(session, path)
            .await
            .map_err(|e| Fail::from_error(&format!("cannot revoke the holders of {path}"), e))?,
    };
    if asked.is_empty() {
        eprintln!("zkr: nobody holds {path}; nothing to revoke");
        return Ok(0);
    }
    for r in &asked {
        let how = match r {
            Revocation::CuratorMark { .. } => " (Curator's way: __REVOKE__ in its node)",
            _ => "",
        };
        eprintln!("zkr: asked {} to let go{how}", r.node());
    }
    let deadline = Instant::now() + a.timeout;
    loop {
        let mut left = Vec::new();
        for r in &asked {
            match session.read(r.node()).await {
                Ok(None) => {}
                Ok(Some(_)) | Err(_) => left.push(r.node()),
            }
        }
        if left.is_empty() {
            eprintln!("zkr: {path}: every holder asked has let go");
            return Ok(0);
        }
        if Instant::now() >= deadline {
            return Err(Fail::new(
                EXIT_NOT_ACQUIRED,
                format!(
                    "{} did not let go within {} (a holder that is not revocable ignores the request)",
                    left.join(", "),
                    human(a.timeout)
                ),
            ));
        }
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(100)) => {}
            sig = signals.recv_stop() => {
                return Err(Fail::new(128 + sig, format!("{} while waiting for {path} to be let go", signals::name(sig))));
            }
        }
    }
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
        .with_data(own_identity().into_bytes())
        .with_acls(&acls(g)?)
        .with_revocable(a.wait.revocable);
    if let Some(layout) = a.layout {
        lock = lock.with_layout(layout);
    }
    let progress = Progress::queue(session, path, LOCK_KINDS, None);
    let mode = Mode::of(&a.wait);
    let held = if write {
        let future = acquire_future!(mode, lock, write, try_write, write_timeout);
        let result = wait::acquire(future, &progress, signals, a.wait.try_lock).await;
        let note = busy_note(&result, &progress).await;
        Held::new(
            acquired(result, path, Some(&a.wait), note)?,
            "the write lock",
        )
    } else {
        let future = acquire_future!(mode, lock, read, try_read, read_timeout);
        let result = wait::acquire(future, &progress, signals, a.wait.try_lock).await;
        let note = busy_note(&result, &progress).await;
        Held::new(
            acquired(result, path, Some(&a.wait), note)?,
            "the read lock",
        )
    };
    let spec = RunSpec::new(path.to_string(), &a.cmd, a.wait.grace, session);
    run::run(held, spec, signals).await
}

/// `zkr elect PATH --id ID -- CMD`.
async fn elect(session: &Session, g: &Global, a: &ElectArgs, signals: &mut Signals) -> Outcome {
    let path = a.path.as_str();
    let election = Election::new(session, path, a.id.clone())
        .map_err(|e| Fail::from_error("", e))?
        .with_acls(&acls(g)?)
        .with_revocable(a.revocable);
    let progress = Progress::election(session, path);
    let future = Box::pin(async move { election.campaign().await });
    let result = wait::acquire(future, &progress, signals, false).await;
    let leadership = acquired(result, path, None, String::new())?;
    let mut spec = RunSpec::new(path.to_string(), &a.cmd, a.grace, session);
    spec.env.push(("ZK_LEADER_ID".to_string(), a.id.clone()));
    run::run(Held::new(leadership, "leadership"), spec, signals).await
}

/// Who holds, for the message of a `--try` refusal or a timeout.
async fn busy_note<G>(result: &Result<zk_recipes::Result<G>, i32>, progress: &Progress) -> String {
    match result {
        Ok(Err(Error::WouldBlock | Error::Timeout)) => progress.holder_note().await,
        _ => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_without_a_port_get_2181() {
        assert_eq!(normalize_hosts("zk1").unwrap(), "zk1:2181");
        assert_eq!(
            normalize_hosts("zk1, zk2:2182,[::1],[::1]:3000").unwrap(),
            "zk1:2181,zk2:2182,[::1]:2181,[::1]:3000"
        );
    }

    #[test]
    fn malformed_hosts_are_named() {
        for (bad, says) in [
            ("zk1:x", "\"x\" is not a port"),
            ("zk1:0", "is not a port"),
            ("zk1:70000", "is not a port"),
            ("zk1,,zk2", "empty server entry"),
            (":2181", "no host name"),
            ("::1", "more than one ':'"),
            ("[::1", "never closes"),
            ("a b:1", "in the host name"),
        ] {
            let err = normalize_hosts(bad).unwrap_err();
            assert!(err.contains(says), "{bad}: expected {says:?} in {err:?}");
            assert!(!err.contains("with_"), "{bad}: a library name in {err:?}");
        }
    }

    #[test]
    fn auth_is_digest_user_password() {
        assert_eq!(
            parse_auth("digest:alice:s:e:cret\n", "t").unwrap(),
            ("alice".to_string(), "s:e:cret".to_string())
        );
        for bad in [
            "alice:secret",
            "sasl:alice:pw",
            "digest::pw",
            "digest:alice",
            "",
        ] {
            let fail = parse_auth(bad, "--auth").unwrap_err();
            assert_eq!(fail.code, crate::EXIT_USAGE, "{bad}");
            assert!(
                fail.message.contains("digest:USER:PASSWORD"),
                "{bad}: {}",
                fail.message
            );
        }
    }
}
