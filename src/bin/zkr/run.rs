//! Running CMD under a held lock, and stopping it the moment the lock is lost.
//!
//! CMD runs in its own process group, so that a loss can stop everything it started. The
//! supervising loop waits on, in this order of priority:
//!
//! 1. a 100 ms tick comparing `Instant::now()` with the previous tick: a gap longer than 85%
//!    of the session timeout means `zkr` itself was paused (SIGSTOP, a frozen VM) for long
//!    enough that the server may have expired the session and handed the lock to someone else
//!    while CMD kept running. CMD is stopped before anything else is looked at;
//! 2. the guard's loss signal (session expired, the loss policy gave up on the connection, or
//!    the node was deleted);
//! 3. signals to `zkr`, passed on to CMD's process group;
//! 4. CMD's exit, accepted as "ran to the end under the lock" only after checks 1 and 2 pass
//!    again at that moment.
//!
//! On a loss: SIGTERM to the group at once, SIGKILL after `--grace`, exit 76.

use std::ffi::OsString;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::ExitStatus;
use std::time::{Duration, Instant};

use tokio::time::MissedTickBehavior;
use zk_recipes::{Leadership, LockGuard, ReadGuard, WriteGuard};

use crate::duration::human;
use crate::signals::{self, Signals};
use crate::{Fail, Outcome, EXIT_LOST};

/// How often the supervising loop looks at the clock.
const TICK: Duration = Duration::from_millis(100);

/// What is held while CMD runs.
pub enum Held {
    Lock(LockGuard),
    Read(ReadGuard),
    Write(WriteGuard),
    Leader(Leadership),
}

/// Calls the same accessor on whichever guard is held.
macro_rules! each {
    ($held:expr, $g:ident => $e:expr) => {
        match $held {
            Held::Lock($g) => $e,
            Held::Read($g) => $e,
            Held::Write($g) => $e,
            Held::Leader($g) => $e,
        }
    };
}

impl Held {
    fn what(&self) -> &'static str {
        match self {
            Held::Lock(_) => "the lock",
            Held::Read(_) => "the read lock",
            Held::Write(_) => "the write lock",
            Held::Leader(_) => "leadership",
        }
    }

    fn node(&self) -> String {
        each!(self, g => g.path().to_string())
    }

    fn fencing_token(&self) -> i64 {
        each!(self, g => g.fencing_token())
    }

    fn session_id(&self) -> i64 {
        each!(self, g => g.session_id())
    }

    fn is_lost(&self) -> bool {
        each!(self, g => g.is_lost())
    }

    fn loss_reason(&self) -> String {
        let reason = each!(self, g => g.loss_reason());
        reason.map_or_else(|| "lost".to_string(), |r| r.to_string())
    }

    async fn lost(&self) {
        each!(self, g => g.lost().await)
    }

    /// Releases the lock, or resigns the leadership.
    async fn release(self) -> zk_recipes::Result<()> {
        match self {
            Held::Lock(g) => g.release().await,
            Held::Read(g) => g.release().await,
            Held::Write(g) => g.release().await,
            Held::Leader(g) => g.resign().await,
        }
    }
}

/// What to run, and how.
pub struct RunSpec {
    /// The lock path as given (ZK_LOCK_PATH).
    pub path: String,
    pub cmd: Vec<OsString>,
    /// SIGTERM-to-SIGKILL delay on loss.
    pub grace: Duration,
    pub session_timeout: Duration,
    /// When the lock was acquired (a pause before CMD starts counts too).
    pub acquired_at: Instant,
    /// Extra environment for CMD.
    pub env: Vec<(String, String)>,
}

/// Why CMD is being stopped.
enum Loss {
    Paused(Duration),
    Lost(String),
}

/// The exit status `zkr` passes on for CMD's `status`: its code, or 128+N for signal N.
pub fn exit_code(status: ExitStatus) -> i32 {
    match (status.code(), status.signal()) {
        (Some(code), _) => code,
        (None, Some(sig)) => 128 + sig,
        (None, None) => crate::EXIT_FAILURE,
    }
}

/// A pause is a gap between ticks longer than this.
fn pause_threshold(session_timeout: Duration) -> Duration {
    session_timeout * 85 / 100
}

/// Runs CMD under `held` until it exits (its status) or `held` is lost (76).
pub async fn run(held: Held, spec: RunSpec, signals: &mut Signals) -> Outcome {
    let threshold = pause_threshold(spec.session_timeout);
    let what = held.what();
    let path = &spec.path;
    // Kill first, ask questions later: also before CMD starts.
    let since = spec.acquired_at.elapsed();
    if since > threshold || held.is_lost() {
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

    let mut command = std::process::Command::new(&spec.cmd[0]);
    command
        .args(&spec.cmd[1..])
        .env("ZK_LOCK_PATH", path)
        .env("ZK_LOCK_NODE", held.node())
        .env("ZK_FENCING_TOKEN", held.fencing_token().to_string())
        .env("ZK_SESSION_ID", format!("{:#x}", held.session_id()))
        .envs(spec.env.iter().map(|(k, v)| (k, v)))
        .process_group(0);
    let mut child = match tokio::process::Command::from(command).spawn() {
        Ok(child) => child,
        Err(e) => {
            let program = spec.cmd[0].to_string_lossy().into_owned();
            let _ = tokio::time::timeout(spec.session_timeout, held.release()).await;
            let code = if e.kind() == std::io::ErrorKind::NotFound {
                127
            } else {
                126
            };
            return Err(Fail::new(code, format!("cannot run {program:?}: {e}")));
        }
    };
    let pgid = child.id().map_or(0, |id| id as i32);

    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut last_tick = Instant::now();
    let paused = |last_tick: &mut Instant| -> Option<Duration> {
        let now = Instant::now();
        let gap = now.saturating_duration_since(*last_tick);
        *last_tick = now;
        (gap > threshold).then_some(gap)
    };
    enum Event {
        Tick,
        Lost,
        Signal(i32),
        Exited(std::io::Result<ExitStatus>),
    }
    let loss = loop {
        let event = tokio::select! {
            biased;
            _ = tick.tick() => Event::Tick,
            _ = held.lost() => Event::Lost,
            sig = signals.recv() => Event::Signal(sig),
            status = child.wait() => Event::Exited(status),
        };
        // Whatever woke us, look at the clock first: after a pause the timer that should
        // have fired first may not have been processed yet.
        if let Some(gap) = paused(&mut last_tick) {
            break Loss::Paused(gap);
        }
        match event {
            Event::Tick => {}
            Event::Lost => break Loss::Lost(held.loss_reason()),
            Event::Signal(sig) => {
                eprintln!("zkr: passing {} on to CMD", signals::name(sig));
                signals::kill_group(pgid, sig);
            }
            Event::Exited(status) => {
                // CMD ended under the lock only if nothing was lost by now either.
                if held.is_lost() {
                    break Loss::Lost(held.loss_reason());
                }
                let status = match status {
                    Ok(status) => status,
                    Err(e) => {
                        signals::kill_group(pgid, libc::SIGKILL);
                        let _ = tokio::time::timeout(spec.session_timeout, held.release()).await;
                        return Err(Fail::new(
                            crate::EXIT_FAILURE,
                            format!("cannot wait for CMD: {e}"),
                        ));
                    }
                };
                match tokio::time::timeout(spec.session_timeout, held.release()).await {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => eprintln!("zkr: CMD finished, but releasing {path} failed: {e}"),
                    Err(_) => eprintln!(
                        "zkr: CMD finished, but releasing {path} did not finish within {}; the node goes with the session",
                        human(spec.session_timeout)
                    ),
                }
                return Ok(exit_code(status));
            }
        }
    };

    // Lost: stop CMD before anything else.
    signals::kill_group(pgid, libc::SIGTERM);
    let why = match &loss {
        Loss::Paused(gap) => format!(
            "zkr was paused for {}, longer than 85% of the session timeout ({}): another process may hold it now",
            human(*gap),
            human(spec.session_timeout)
        ),
        Loss::Lost(reason) => reason.clone(),
    };
    eprintln!(
        "zkr: lost {what} on {path} while CMD ran ({why}): sent SIGTERM to CMD, SIGKILL in {}",
        human(spec.grace)
    );
    let status = match tokio::time::timeout(spec.grace, child.wait()).await {
        Ok(status) => status.ok(),
        Err(_) => {
            signals::kill_group(pgid, libc::SIGKILL);
            eprintln!(
                "zkr: CMD still ran {} after SIGTERM: sent SIGKILL",
                human(spec.grace)
            );
            child.wait().await.ok()
        }
    };
    drop(held);
    let ended = status.map_or_else(
        || "CMD ended".to_string(),
        |s| format!("CMD ended with status {}", exit_code(s)),
    );
    Err(Fail::new(
        EXIT_LOST,
        format!("{ended}; exiting {EXIT_LOST} because {what} on {path} was lost"),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_codes_follow_the_shell() {
        assert_eq!(exit_code(ExitStatus::from_raw(0)), 0);
        assert_eq!(exit_code(ExitStatus::from_raw(3 << 8)), 3);
        assert_eq!(exit_code(ExitStatus::from_raw(libc::SIGTERM)), 143);
        assert_eq!(exit_code(ExitStatus::from_raw(libc::SIGKILL)), 137);
    }

    #[test]
    fn pause_threshold_is_85_percent() {
        assert_eq!(
            pause_threshold(Duration::from_secs(2)),
            Duration::from_millis(1700)
        );
    }
}
