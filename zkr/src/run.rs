//! Running CMD under a held lock, and stopping it the moment the lock is lost.
//!
//! CMD runs in its own process group under a supervising process ([`crate::supervise`]) that
//! kills the group if `zkr` dies, hands CMD the terminal, and carries out stops. The loop
//! here waits on, in this order of priority:
//!
//! 1. a 100 ms tick comparing `Instant::now()` with the previous tick: a gap longer than 85%
//!    of the session timeout the server granted means `zkr` itself was paused (SIGSTOP, a
//!    frozen VM, Ctrl-Z) for long enough that the server may have expired the session and
//!    handed the lock to someone else while CMD kept running. CMD is stopped before anything
//!    else is looked at;
//! 2. the guard's loss signal (session expired, the loss policy gave up on the connection, or
//!    the node was deleted);
//! 3. signals to `zkr`: SIGTERM, SIGINT, SIGHUP and SIGQUIT stop CMD (that signal to its
//!    group, SIGKILL after `--grace`); SIGUSR1 and SIGUSR2 are passed on; SIGCONT (`fg`
//!    after Ctrl-Z) continues CMD;
//! 4. session state changes, logged as warnings;
//! 5. CMD's exit (reported by the supervisor once nothing CMD started runs any more),
//!    accepted as "ran to the end under the lock" only after checks 1 and 2 pass again at
//!    that moment.
//!
//! On a loss: SIGTERM to the group at once, SIGKILL after `--grace`, exit 76 (or
//! `--lost-exit-code`).

use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::time::{Duration, Instant};

use tokio::time::MissedTickBehavior;
use zk_recipes::{LockGuard, Session, SessionEvent};

use crate::duration::human;
use crate::signals::{self, Signals};
use crate::{Fail, Outcome, EXIT_LOST};

/// How often the supervising loop looks at the clock.
const TICK: Duration = Duration::from_millis(100);

/// What is held while CMD runs: the library's guard core, whatever the recipe.
pub struct Held {
    inner: Inner,
    what: &'static str,
}

enum Inner {
    One(Box<LockGuard>),
    /// A multi-lock: its own guard signals a loss or a revocation of any lock and releases all.
    Many(zk_recipes::MultiGuard),
}

impl Held {
    pub fn new(guard: impl Into<LockGuard>, what: &'static str) -> Held {
        Held {
            inner: Inner::One(Box::new(guard.into())),
            what,
        }
    }

    /// Every lock of a multi-lock.
    pub fn multi(held: zk_recipes::MultiGuard, what: &'static str) -> Held {
        Held {
            inner: Inner::Many(held),
            what,
        }
    }

    fn what(&self) -> &'static str {
        self.what
    }

    /// The guards, in path order (one unless a multi-lock).
    fn guards(&self) -> &[LockGuard] {
        match &self.inner {
            Inner::One(g) => std::slice::from_ref(&**g),
            Inner::Many(m) => m.guards(),
        }
    }

    fn first(&self) -> &LockGuard {
        &self.guards()[0]
    }

    fn node(&self) -> String {
        self.first().path().to_string()
    }

    fn fencing_token(&self) -> i64 {
        self.first().fencing_token()
    }

    /// One line per lock: `ZK_LOCK_NODES` and `ZK_FENCING_TOKENS`.
    fn nodes_and_tokens(&self) -> (String, String) {
        let nodes: Vec<&str> = self.guards().iter().map(LockGuard::path).collect();
        let tokens: Vec<String> = self
            .guards()
            .iter()
            .map(|g| g.fencing_token().to_string())
            .collect();
        (nodes.join("\n"), tokens.join("\n"))
    }

    fn session_id(&self) -> i64 {
        self.first().session_id()
    }

    fn is_lost(&self) -> bool {
        self.guards().iter().any(LockGuard::is_lost)
    }

    fn loss_reason(&self) -> String {
        self.guards()
            .iter()
            .find_map(LockGuard::loss_reason)
            .map_or_else(|| "lost".to_string(), |r| r.to_string())
    }

    async fn revoke_requested(&self) {
        match &self.inner {
            Inner::One(g) => g.revoke_requested().await,
            Inner::Many(m) => m.revoke_requested().await,
        }
    }

    async fn lost(&self) {
        match &self.inner {
            Inner::One(g) => g.lost().await,
            Inner::Many(m) => m.lost().await,
        }
    }

    /// Releases the lock (a multi-lock's, the last taken first), or resigns the leadership.
    async fn release(self) -> zk_recipes::Result<()> {
        match self.inner {
            Inner::One(g) => g.release().await,
            Inner::Many(m) => m.release().await,
        }
    }
}

/// What to run, and how.
pub struct RunSpec {
    /// The lock path as given (ZK_LOCK_PATH).
    pub path: String,
    pub cmd: Vec<OsString>,
    /// SIGTERM-to-SIGKILL delay of every stop: a loss, or a signal to zkr.
    pub grace: Duration,
    /// The session: its granted timeout (which the pause check uses), its state changes.
    pub session: Session,
    /// When the lock was acquired (a pause before CMD starts counts too).
    pub acquired_at: Instant,
    /// Extra environment for CMD.
    pub env: Vec<(String, String)>,
}

impl RunSpec {
    /// CMD under the lock on `path`, acquired just now, with no extra environment.
    pub fn new(path: String, cmd: &[OsString], grace: Duration, session: &Session) -> RunSpec {
        RunSpec {
            path,
            cmd: cmd.to_vec(),
            grace,
            session: session.clone(),
            acquired_at: Instant::now(),
            env: Vec::new(),
        }
    }
}

/// Why CMD is being stopped.
enum Loss {
    Paused(Duration),
    Lost(String),
}

/// A pause is a gap between ticks longer than this.
fn pause_threshold(session_timeout: Duration) -> Duration {
    session_timeout * 85 / 100
}

/// Whether `sig` is one that stops CMD (with the grace period) rather than one passed on.
fn is_stop(sig: i32) -> bool {
    matches!(
        sig,
        signals::SIGTERM | signals::SIGINT | signals::SIGHUP | signals::SIGQUIT
    )
}

/// What the supervisor reports (see [`crate::supervise`]).
#[derive(Debug, PartialEq, Eq)]
enum Report {
    Pid(i32),
    Error(i32, String),
    Killed,
    Exit(i32),
    /// The report pipe closed: the supervisor has exited.
    Gone,
}

fn parse_report(line: &str) -> Option<Report> {
    let (verb, rest) = line.split_once(' ').unwrap_or((line, ""));
    match verb {
        "pid" => rest.parse().ok().map(Report::Pid),
        "exit" => rest.parse().ok().map(Report::Exit),
        "killed" => Some(Report::Killed),
        "error" => {
            let (code, message) = rest.split_once(' ')?;
            Some(Report::Error(code.parse().ok()?, message.to_string()))
        }
        _ => None,
    }
}

/// CMD under its supervising process (`zkr __supervise`, see [`crate::supervise`]).
struct Supervised {
    process: tokio::process::Child,
    ctl: Option<std::fs::File>,
    report: tokio::io::Lines<tokio::io::BufReader<tokio::net::unix::pipe::Receiver>>,
    /// CMD's pid, which is also its process group.
    pgid: i32,
}

impl Supervised {
    /// Starts the supervisor, which starts CMD; returns once CMD runs (or could not start).
    async fn start(spec: &RunSpec, held: &Held) -> Result<Supervised, Fail> {
        use nix::fcntl::{fcntl, FcntlArg, FdFlag, OFlag};
        use std::os::fd::AsRawFd;
        use tokio::io::AsyncBufReadExt;

        let fail = |e: &dyn std::fmt::Display| {
            Fail::new(
                crate::EXIT_FAILURE,
                format!("cannot start CMD's supervising process: {e}"),
            )
        };
        // A child subreaper, as the supervisor is: if the supervisor dies (killed alone),
        // what CMD started, in its group or out of it, is re-parented to us and stopped here
        // (`finish`) before the lock is released.
        nix::sys::prctl::set_child_subreaper(true).map_err(|e| fail(&e))?;
        let (ctl_r, ctl_w) = nix::unistd::pipe2(OFlag::O_CLOEXEC).map_err(|e| fail(&e))?;
        let (rep_r, rep_w) = nix::unistd::pipe2(OFlag::O_CLOEXEC).map_err(|e| fail(&e))?;
        let (ctl_fd, rep_fd) = (ctl_r.as_raw_fd(), rep_w.as_raw_fd());
        let (nodes, tokens) = held.nodes_and_tokens();
        let mut command = std::process::Command::new("/proc/self/exe");
        command
            .arg0("zkr")
            .arg(crate::supervise::SUBCOMMAND)
            .arg(std::process::id().to_string())
            .arg(ctl_fd.to_string())
            .arg(rep_fd.to_string())
            .arg(spec.grace.as_millis().to_string())
            .arg("--")
            .args(&spec.cmd)
            .env("ZK_LOCK_PATH", &spec.path)
            .env("ZK_LOCK_NODES", nodes)
            .env("ZK_FENCING_TOKENS", tokens)
            .env("ZK_LOCK_NODE", held.node())
            .env("ZK_FENCING_TOKEN", held.fencing_token().to_string())
            .env("ZK_SESSION_ID", format!("{:#x}", held.session_id()))
            .envs(spec.env.iter().map(|(k, v)| (k, v)));
        // SAFETY: only fcntl, which is async-signal-safe, runs between fork and exec.
        unsafe {
            command.pre_exec(move || {
                for fd in [ctl_fd, rep_fd] {
                    let fd = std::os::fd::BorrowedFd::borrow_raw(fd);
                    fcntl(fd, FcntlArg::F_SETFD(FdFlag::empty()))?;
                }
                Ok(())
            });
        }
        let process = tokio::process::Command::from(command)
            .spawn()
            .map_err(|e| fail(&e))?;
        // Our copies of the supervisor's ends: closed, so that either side sees the other go.
        drop((ctl_r, rep_w));
        let receiver =
            tokio::net::unix::pipe::Receiver::from_owned_fd(rep_r).map_err(|e| fail(&e))?;
        let mut sup = Supervised {
            process,
            ctl: Some(std::fs::File::from(ctl_w)),
            report: tokio::io::BufReader::new(receiver).lines(),
            pgid: 0,
        };
        match sup.next().await {
            Report::Pid(pid) => {
                sup.pgid = pid;
                Ok(sup)
            }
            Report::Error(code, message) => {
                let _ = sup.process.wait().await;
                Err(Fail::new(code, message))
            }
            other => {
                let _ = sup.process.wait().await;
                Err(fail(&format!("it reported {other:?}")))
            }
        }
    }

    /// The next report. Cancel safe.
    async fn next(&mut self) -> Report {
        loop {
            match self.report.next_line().await {
                Ok(Some(line)) => {
                    if let Some(report) = parse_report(&line) {
                        return report;
                    }
                }
                Ok(None) | Err(_) => return Report::Gone,
            }
        }
    }

    fn send(&mut self, line: &str) {
        use std::io::Write;
        if let Some(ctl) = &mut self.ctl {
            if writeln!(ctl, "{line}").is_err() {
                self.ctl = None;
            }
        }
    }

    /// Stops CMD: `sig` to its group, SIGKILL after the grace (the supervisor's clock).
    fn stop(&mut self, sig: i32) {
        self.send(&format!("stop {sig}"));
    }

    /// Waits for CMD's status until the supervisor exits. `None` if the supervisor died
    /// without one (CMD's group is then SIGKILLed from here).
    async fn finish(&mut self, grace: Duration) -> Option<i32> {
        let mut status = None;
        loop {
            match self.next().await {
                Report::Exit(code) => status = Some(code),
                Report::Killed => eprintln!(
                    "zkr: CMD still ran {} after it was told to stop: sent SIGKILL",
                    human(grace)
                ),
                Report::Gone => break,
                Report::Pid(_) | Report::Error(..) => {}
            }
        }
        if status.is_none() {
            signals::kill_group(self.pgid, signals::SIGKILL);
        }
        let _ = self.process.wait().await;
        if status.is_none() {
            // The supervisor died without cleaning up: what CMD started outside its group
            // was re-parented to us (a subreaper too, see `start`).
            crate::supervise::kill_orphans(grace + Duration::from_secs(2));
        }
        status
    }
}

/// Runs CMD under `held` until it exits (its status) or `held` is lost (76).
pub async fn run(held: Held, spec: RunSpec, signals: &mut Signals) -> Outcome {
    let session = spec.session.clone();
    let threshold = || pause_threshold(session.session_timeout());
    let what = held.what();
    let path = &spec.path;
    let release_within = session.session_timeout();
    // Kill first, ask questions later: also before CMD starts.
    let since = spec.acquired_at.elapsed();
    if since > threshold() || held.is_lost() {
        let why = if held.is_lost() {
            held.loss_reason()
        } else {
            format!("zkr was paused for {}", human(since))
        };
        return Err(Fail::new(
            EXIT_LOST,
            format!("lost {what} on {path} before CMD started ({why}); CMD was not run"),
        ));
    }

    let mut events = session.every_change();
    let mut cont =
        tokio::signal::unix::signal(tokio::signal::unix::SignalKind::from_raw(signals::SIGCONT))
            .map_err(|e| {
                Fail::new(
                    crate::EXIT_FAILURE,
                    format!("cannot install signal handlers: {e}"),
                )
            })?;
    // The clock check covers starting CMD too: a zkr stopped while the supervisor reports
    // CMD's pid finds the gap on its first look.
    let mut last_tick = Instant::now();
    let mut cmd = match Supervised::start(&spec, &held).await {
        Ok(cmd) => cmd,
        Err(fail) => {
            let _ = tokio::time::timeout(release_within, held.release()).await;
            return Err(fail);
        }
    };

    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let paused = |last_tick: &mut Instant| -> Option<Duration> {
        let now = Instant::now();
        let gap = now.saturating_duration_since(*last_tick);
        *last_tick = now;
        (gap > threshold()).then_some(gap)
    };
    enum Event {
        Tick,
        Lost,
        Signal(i32),
        Continued,
        Session(Option<SessionEvent>),
        Report(Report),
        Revoke,
    }
    let mut stopping = false;
    let loss = loop {
        let event = tokio::select! {
            biased;
            _ = tick.tick() => Event::Tick,
            _ = held.lost() => Event::Lost,
            sig = signals.recv() => Event::Signal(sig),
            _ = cont.recv() => Event::Continued,
            e = events.recv() => Event::Session(e.ok()),
            report = cmd.next() => Event::Report(report),
            _ = held.revoke_requested(), if !stopping => Event::Revoke,
        };
        // Whatever woke us, look at the clock first: after a pause the timer that should
        // have fired first may not have been processed yet.
        if let Some(gap) = paused(&mut last_tick) {
            break Loss::Paused(gap);
        }
        match event {
            Event::Tick => {}
            Event::Lost => break Loss::Lost(held.loss_reason()),
            Event::Continued => cmd.send("cont"),
            Event::Session(Some(SessionEvent::Suspended { .. })) => tracing::warn!(
                "the connection to ZooKeeper dropped while CMD runs; {what} on {path} holds while the session may still live"
            ),
            Event::Session(Some(SessionEvent::Reconnected { .. })) => {
                tracing::warn!("reconnected to ZooKeeper, same session: {what} on {path} is kept")
            }
            Event::Session(_) => {}
            Event::Revoke => {
                eprintln!(
                    "zkr: asked to let go of {what} on {path} (zkr revoke): sent SIGTERM to CMD, SIGKILL in {}; released when it ends",
                    human(spec.grace)
                );
                stopping = true;
                cmd.stop(signals::SIGTERM);
            }
            Event::Signal(sig) if is_stop(sig) => {
                if !stopping {
                    eprintln!(
                        "zkr: passing {} on to CMD; SIGKILL in {} if it has not exited",
                        signals::name(sig),
                        human(spec.grace)
                    );
                }
                stopping = true;
                cmd.stop(sig);
            }
            Event::Signal(sig) => {
                eprintln!("zkr: passing {} on to CMD", signals::name(sig));
                cmd.send(&format!("signal {sig}"));
            }
            Event::Report(Report::Killed) => eprintln!(
                "zkr: CMD still ran {} after it was told to stop: sent SIGKILL",
                human(spec.grace)
            ),
            Event::Report(Report::Pid(_) | Report::Error(..)) => {}
            Event::Report(report) => {
                // CMD ended (or its supervisor died).
                let status = match report {
                    Report::Exit(code) => {
                        let _ = cmd.process.wait().await;
                        Some(code)
                    }
                    _ => cmd.finish(spec.grace).await,
                };
                // CMD ended under the lock only if nothing was lost by now either.
                if let Some(gap) = paused(&mut last_tick) {
                    break Loss::Paused(gap);
                }
                if held.is_lost() {
                    break Loss::Lost(held.loss_reason());
                }
                let Some(status) = status else {
                    let _ = tokio::time::timeout(release_within, held.release()).await;
                    return Err(Fail::new(
                        crate::EXIT_FAILURE,
                        "CMD's supervising process died; CMD's process group was killed",
                    ));
                };
                match tokio::time::timeout(release_within, held.release()).await {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => eprintln!("zkr: CMD finished, but releasing {path} failed: {e}"),
                    Err(_) => eprintln!(
                        "zkr: CMD finished, but releasing {path} did not finish within {}; the node goes with the session",
                        human(release_within)
                    ),
                }
                return Ok(status);
            }
        }
    };

    // Lost: stop CMD before anything else.
    cmd.stop(signals::SIGTERM);
    let why = match &loss {
        Loss::Paused(gap) => format!(
            "zkr was paused for {}, longer than 85% of the session timeout ({}): another process may hold it now",
            human(*gap),
            human(session.session_timeout())
        ),
        Loss::Lost(reason) => reason.clone(),
    };
    eprintln!(
        "zkr: lost {what} on {path} while CMD ran ({why}): sent SIGTERM to CMD, SIGKILL in {}",
        human(spec.grace)
    );
    let bound = spec.grace + Duration::from_secs(5);
    let status = match tokio::time::timeout(bound, cmd.finish(spec.grace)).await {
        Ok(status) => status,
        Err(_) => {
            signals::kill_group(cmd.pgid, signals::SIGKILL);
            let _ = cmd.process.start_kill();
            None
        }
    };
    drop(held);
    let ended = status.map_or_else(
        || "CMD ended".to_string(),
        |s| format!("CMD ended with status {s}"),
    );
    Err(Fail::new(
        EXIT_LOST,
        // `main` adds the status it exits with (`--lost-exit-code` renumbers it).
        format!("{ended}, because {what} on {path} was lost"),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reports_parse() {
        assert_eq!(parse_report("pid 42"), Some(Report::Pid(42)));
        assert_eq!(parse_report("exit 143"), Some(Report::Exit(143)));
        assert_eq!(parse_report("killed"), Some(Report::Killed));
        assert_eq!(
            parse_report("error 127 cannot run \"x\": gone"),
            Some(Report::Error(127, "cannot run \"x\": gone".into()))
        );
        assert_eq!(parse_report("what"), None);
    }

    #[test]
    fn pause_threshold_is_85_percent() {
        assert_eq!(
            pause_threshold(Duration::from_secs(2)),
            Duration::from_millis(1700)
        );
    }
}
