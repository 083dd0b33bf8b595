//! Acquiring with progress on stderr.
//!
//! On a terminal a live line, redrawn every second:
//! `zkr: waiting for /jobs/nightly: 3 ahead, held by web-1:4242 for 12s`. Otherwise (a cron
//! log, a pipe) one line when the wait starts, one more whenever our place or the holder
//! changes (looked at every second, printed at most every [`REPRINT_GAP`]), and one when the
//! lock is acquired. A lock that is free is acquired before the first look at the queue
//! (50 ms), so it prints nothing.

use std::future::Future;
use std::io::Write;
use std::pin::pin;
use std::time::{Duration, Instant};

use zk_recipes::{Contender, ExclusiveLock, NodeKind, Session};

use crate::duration::human;
use crate::show::held_by;
use crate::signals::Signals;
use crate::stderr_is_terminal;
use zk_recipes::{roles, Role};

/// How a wait is described: which queue, and how to find our place in it.
pub struct Progress {
    session: Session,
    path: String,
    what: Queue,
    /// An election: "waiting to lead", "led by".
    election: bool,
}

enum Queue {
    /// Contender nodes of these kinds under the path.
    Nodes {
        kinds: &'static [NodeKind],
        permits: Option<usize>,
    },
    /// The simple lock: one node, no queue.
    Simple(ExclusiveLock),
    /// A multi-lock: the first of these locks we wait for.
    Multi(Vec<Progress>),
}

/// Where we stand.
struct Snapshot {
    /// True while someone else holds what we wait for.
    blocked: bool,
    line: String,
    /// What a non-terminal reprints on: our place and who holds (not for how long).
    key: String,
}

impl Progress {
    /// Progress through a queue of contender nodes of `kinds` (the first `permits` hold, for
    /// a semaphore).
    pub fn queue(
        session: &Session,
        path: &str,
        kinds: &'static [NodeKind],
        permits: Option<usize>,
    ) -> Progress {
        Progress {
            session: session.clone(),
            path: path.to_string(),
            what: Queue::Nodes { kinds, permits },
            election: false,
        }
    }

    /// Progress of a candidate of the election `path`.
    pub fn election(session: &Session, path: &str) -> Progress {
        Progress {
            election: true,
            ..Progress::queue(session, path, &[NodeKind::Latch], None)
        }
    }

    fn verb(&self) -> &'static str {
        if self.election {
            "led"
        } else {
            "held"
        }
    }

    /// Progress on the simple lock `lock`.
    pub fn simple(session: &Session, path: &str, lock: ExclusiveLock) -> Progress {
        Progress {
            session: session.clone(),
            path: path.to_string(),
            what: Queue::Simple(lock),
            election: false,
        }
    }

    /// Progress of a multi-lock on `paths` (fair locks, taken in this order).
    pub fn multi(session: &Session, paths: &[String], kinds: &'static [NodeKind]) -> Progress {
        Progress {
            session: session.clone(),
            path: paths.join(" "),
            what: Queue::Multi(
                paths
                    .iter()
                    .map(|p| Progress::queue(session, p, kinds, None))
                    .collect(),
            ),
            election: false,
        }
    }

    async fn contenders(&self) -> Option<(Vec<Contender>, Option<usize>)> {
        match &self.what {
            Queue::Multi(_) => None,
            Queue::Nodes { kinds, permits } => {
                let list = zk_recipes::list_contenders(&self.session, &self.path)
                    .await
                    .ok()?;
                let list = list
                    .into_iter()
                    .filter(|c| kinds.contains(&c.node.kind))
                    .collect();
                Some((list, *permits))
            }
            Queue::Simple(lock) => {
                let holder = lock.holder().await.ok()?;
                Some((holder.into_iter().filter(|h| h.owner != 0).collect(), None))
            }
        }
    }

    /// Who holds now, as ` (held by … for …)`, or empty: for the `--try` refusal.
    pub async fn holder_note(&self) -> String {
        if let Queue::Multi(each) = &self.what {
            for p in each {
                let note = Box::pin(p.holder_note()).await;
                if !note.is_empty() {
                    let inner = note
                        .trim_start()
                        .trim_start_matches('(')
                        .trim_end_matches(')');
                    return format!(" ({}: {inner})", p.path);
                }
            }
            return String::new();
        }
        let Some((list, permits)) = self.contenders().await else {
            return String::new();
        };
        let roles = roles(&list, permits);
        let holders: Vec<&Contender> = list
            .iter()
            .zip(&roles)
            .filter(|(_, r)| **r == Role::Holder)
            .map(|(c, _)| c)
            .collect();
        held_by(&holders, self.verb())
            .map(|h| format!(" ({h})"))
            .unwrap_or_default()
    }

    /// Our place, or `None` until our node is visible (or on a read error).
    async fn snapshot(&self) -> Option<Snapshot> {
        if let Queue::Multi(each) = &self.what {
            // Where we stand in the first lock of the set we are still blocked on.
            let mut free = None;
            for p in each {
                match Box::pin(p.snapshot()).await {
                    Some(s) if s.blocked => return Some(s),
                    Some(s) => free = Some(s),
                    None => return None,
                }
            }
            return free;
        }
        let me = self.session.session_id()?;
        let (list, permits) = self.contenders().await?;
        let roles = roles(&list, permits);
        let holders: Vec<&Contender> = list
            .iter()
            .zip(&roles)
            .filter(|(c, r)| **r == Role::Holder && c.owner != me)
            .map(|(c, _)| c)
            .collect();
        let held = held_by(&holders, self.verb());
        let holder_ids: Vec<i64> = holders.iter().map(|c| c.czxid).collect();
        if let Queue::Simple(_) = self.what {
            return Some(Snapshot {
                key: format!("{holder_ids:?}"),
                blocked: held.is_some(),
                line: format!(
                    "waiting for {}: {}",
                    self.path,
                    held.unwrap_or_else(|| "free".into())
                ),
            });
        }
        let mine = list.iter().position(|c| c.owner == me)?;
        let mut line = if self.election {
            format!("waiting to lead {}: {mine} ahead", self.path)
        } else {
            format!("waiting for {}: {mine} ahead", self.path)
        };
        if let Some(held) = held {
            line.push_str(", ");
            line.push_str(&held);
        }
        Some(Snapshot {
            blocked: roles[mine] != Role::Holder,
            line,
            key: format!("{mine} {holder_ids:?}"),
        })
    }
}

const CLEAR_LINE: &str = "\r\x1b[2K";

/// On a non-terminal: the least time between two waiting lines.
pub const REPRINT_GAP: Duration = Duration::from_secs(3);

/// Awaits `acquire` while reporting progress (unless `quiet`). `Err(signal)` if a stopping
/// signal came first (the acquire is dropped, which removes our node in the background).
pub async fn acquire<T>(
    acquire: impl Future<Output = zk_recipes::Result<T>>,
    progress: &Progress,
    signals: &mut Signals,
    quiet: bool,
) -> Result<zk_recipes::Result<T>, i32> {
    let tty = stderr_is_terminal();
    let started = Instant::now();
    let mut acquire = pin!(acquire);
    let mut announced = false;
    let mut live = false;
    // Non-terminal: the key of the last line printed, and when.
    let mut printed: Option<(String, Instant)> = None;
    let mut next = (!quiet).then(|| Instant::now() + Duration::from_millis(50));
    loop {
        let look = async {
            match next {
                Some(at) => {
                    tokio::time::sleep_until(at.into()).await;
                    progress.snapshot().await
                }
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            biased;
            result = &mut acquire => {
                if live {
                    eprint!("{CLEAR_LINE}");
                }
                if announced && result.is_ok() {
                    eprintln!("zkr: acquired {} after {}", progress.path, human(started.elapsed()));
                }
                return Ok(result);
            }
            sig = signals.recv_stop() => {
                if live {
                    eprintln!();
                }
                return Err(sig);
            }
            snapshot = look => {
                match snapshot {
                    None => next = Some(Instant::now() + Duration::from_millis(100)),
                    Some(s) if !s.blocked => next = Some(Instant::now() + Duration::from_millis(200)),
                    Some(s) => {
                        if tty {
                            eprint!("{CLEAR_LINE}zkr: {}", s.line);
                            let _ = std::io::stderr().flush();
                            live = true;
                            next = Some(Instant::now() + Duration::from_secs(1));
                        } else {
                            let due = printed.as_ref().is_none_or(|(key, at)| {
                                *key != s.key && at.elapsed() >= REPRINT_GAP
                            });
                            if due {
                                eprintln!("zkr: {}", s.line);
                                printed = Some((s.key, Instant::now()));
                            }
                            next = Some(Instant::now() + Duration::from_secs(1));
                        }
                        announced = true;
                    }
                }
            }
        }
    }
}
