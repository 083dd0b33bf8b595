//! The contenders of the chaos suite, what they record, and the checks run on the records.
//!
//! Every recipe run has one directory and [`CONTENDERS`] contenders, each on its own session.
//! A contender's *cycle* acquires once, records the hold ([`Hold`]: acquired after the acquire
//! returned, released just before the release call or when told of the loss), writes to a
//! token-checking store while it holds (exclusive kinds only), and releases.
//!
//! Fault injectors record [`Window`]s: which contender a fault hit, when, whether the hold must
//! end in a loss notice (`expect_loss`), and whether the fault took the lock away at once
//! (`cut`: a forced session close, a node deleted by an administrator, a frozen process). A
//! holder cannot learn of such a fault before it happens, so its hold is trusted only up to the
//! start of the fault; after that, its writes are the fencing token's job, and the store must
//! refuse them once a newer holder has written. Faults that only cut connections or stop servers
//! do not cut: under the default `Grace` loss policy the holder must be told before the server
//! can hand the lock on, so its whole hold is checked.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use zk_recipes::testing::{monotonic_nanos, FaultProxy};
use zk_recipes::{
    zk, Election, Error, ExclusiveLock, FairLock, MultiLock, RwLock, Semaphore, Session,
};

use crate::support::history::{check, check_semaphore, Event, Kind};

/// Session timeout of every contender (the harness servers accept 1 s to 10 s).
pub const SESSION_TIMEOUT: Duration = Duration::from_secs(2);
/// Permits of every semaphore run (`tests/bin/chaos_child.rs` uses the same).
pub const PERMITS: usize = 2;
/// Contenders per recipe run.
pub const CONTENDERS: usize = 8;
/// An acquire that neither returns nor fails within this is a hang.
pub const ACQUIRE_DEADLINE: Duration = Duration::from_secs(45);
/// How long a contender that is not a fault's victim holds.
pub const HOLD: Duration = Duration::from_millis(40);
/// How often a holder writes to the store.
pub const WRITE_EVERY: Duration = Duration::from_millis(25);
/// Liveness: a free lock (or permit) must reach a waiter within this, outside faults.
pub const LIVENESS_BOUND: Duration = Duration::from_secs(2);

/// The recipes under test.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Recipe {
    Simple,
    Fair,
    Sem,
    Rw,
    Elect,
    /// Two fair locks (`DIR/a`, `DIR/b`) taken together by a multi-lock.
    Multi,
}

impl Recipe {
    pub const ALL: [Recipe; 6] = [
        Recipe::Simple,
        Recipe::Fair,
        Recipe::Sem,
        Recipe::Rw,
        Recipe::Elect,
        Recipe::Multi,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Recipe::Simple => "simple lock",
            Recipe::Fair => "fair lock",
            Recipe::Sem => "semaphore",
            Recipe::Rw => "rw lock",
            Recipe::Elect => "election",
            Recipe::Multi => "multi-lock",
        }
    }

    /// Short form for node paths and contender names.
    pub fn short(self) -> &'static str {
        match self {
            Recipe::Simple => "simple",
            Recipe::Fair => "fair",
            Recipe::Sem => "sem",
            Recipe::Rw => "rw",
            Recipe::Elect => "elect",
            Recipe::Multi => "multi",
        }
    }

    /// The `RECIPE` argument of `chaos_child` for a victim (the rw victim writes).
    pub fn child_arg(self) -> &'static str {
        match self {
            Recipe::Simple => "simple",
            Recipe::Fair => "fair",
            Recipe::Sem => "sem",
            Recipe::Rw => "write",
            Recipe::Elect => "elect",
            Recipe::Multi => "multi",
        }
    }

    /// What a hold of this recipe is, for the history checker.
    pub fn kind(self, write: bool) -> Kind {
        match self {
            Recipe::Simple | Recipe::Fair | Recipe::Multi => Kind::Exclusive,
            Recipe::Sem => Kind::Semaphore,
            Recipe::Rw if write => Kind::Write,
            Recipe::Rw => Kind::Read,
            Recipe::Elect => Kind::Leader,
        }
    }

    /// Whether contender `idx` writes (rather than reads) in `round`. Victims (index 0) write.
    pub fn wants_write(self, idx: usize, round: usize) -> bool {
        self != Recipe::Rw || idx == 0 || (idx + round).is_multiple_of(3)
    }
}

/// Whether holds of this kind are alone and so write to the store with their token.
pub fn writes_to_store(kind: Kind) -> bool {
    matches!(kind, Kind::Exclusive | Kind::Write | Kind::Leader)
}

/// A recipe handle.
pub enum Handle {
    Simple(ExclusiveLock),
    Fair(FairLock),
    Sem(Semaphore),
    Rw(RwLock),
    Elect(Election),
    Multi(MultiLock),
}

/// The lock directories of a run in `dir`: the multi-lock's two, else `dir` itself.
pub fn lock_dirs(recipe: Recipe, dir: &str) -> Vec<String> {
    match recipe {
        Recipe::Multi => vec![format!("{dir}/a"), format!("{dir}/b")],
        _ => vec![dir.to_string()],
    }
}

pub use crate::support::held::Held;

/// A guarded write in flight.
type GuardedWrite<'a> = std::pin::Pin<
    Box<
        dyn std::future::Future<Output = zk_recipes::Result<Vec<zk::MultiWriteResult>>> + Send + 'a,
    >,
>;

impl Handle {
    pub fn new(recipe: Recipe, session: &Session, dir: &str, who: &str, requeue: bool) -> Handle {
        match recipe {
            // The node is a child of the run's directory, like every other recipe's nodes.
            Recipe::Simple => Handle::Simple(
                ExclusiveLock::new(session, format!("{dir}/lock"))
                    .unwrap()
                    .with_data(who),
            ),
            Recipe::Fair => Handle::Fair(
                FairLock::new(session, dir)
                    .unwrap()
                    .with_data(who)
                    .with_requeue_on_expiry(requeue),
            ),
            Recipe::Sem => Handle::Sem(
                Semaphore::new(session, dir, PERMITS)
                    .unwrap()
                    .with_data(who)
                    .with_requeue_on_expiry(requeue),
            ),
            Recipe::Rw => Handle::Rw(
                RwLock::new(session, dir)
                    .unwrap()
                    .with_data(who)
                    .with_requeue_on_expiry(requeue),
            ),
            Recipe::Elect => Handle::Elect(
                Election::new(session, dir, who)
                    .unwrap()
                    .with_requeue_on_expiry(requeue),
            ),
            // Named in reverse: the multi-lock sorts them.
            Recipe::Multi => Handle::Multi(
                MultiLock::new(session, lock_dirs(recipe, dir).iter().rev())
                    .unwrap()
                    .with_data(who)
                    .with_requeue_on_expiry(requeue),
            ),
        }
    }

    /// Makes the locks revocable (the simple lock cannot be: unchanged).
    pub fn revocable(self, on: bool) -> Handle {
        match self {
            Handle::Fair(l) => Handle::Fair(l.with_revocable(on)),
            Handle::Sem(s) => Handle::Sem(s.with_revocable(on)),
            Handle::Rw(l) => Handle::Rw(l.with_revocable(on)),
            Handle::Elect(e) => Handle::Elect(e.with_revocable(on)),
            Handle::Multi(m) => Handle::Multi(m.with_revocable(on)),
            simple => simple,
        }
    }

    pub async fn acquire(&self, write: bool) -> zk_recipes::Result<Held> {
        if let Handle::Multi(m) = self {
            return Ok(Held::Many(m.lock().await?));
        }
        Ok(Held::one(match self {
            Handle::Simple(l) => l.lock().await?,
            Handle::Fair(l) => l.lock().await?,
            Handle::Sem(s) => s.acquire().await?,
            Handle::Rw(l) if write => l.write().await?.into(),
            Handle::Rw(l) => l.read().await?.into(),
            Handle::Elect(e) => e.campaign().await?.into(),
            Handle::Multi(_) => unreachable!("taken above"),
        }))
    }
}

/// One holding interval.
#[derive(Debug, Clone)]
pub struct Hold {
    pub who: String,
    pub kind: Kind,
    pub acquired_ns: u64,
    /// Just before the release call, or when told of the loss.
    pub released_ns: u64,
    pub token: i64,
    pub lost: bool,
}

/// A write to the token-checking store.
#[derive(Debug, Clone)]
pub struct Write {
    pub ns: u64,
    pub token: i64,
    pub who: String,
}

/// A fault as it hit one contender.
#[derive(Debug, Clone)]
pub struct Window {
    pub who: String,
    pub what: &'static str,
    pub start_ns: u64,
    pub end_ns: u64,
    /// The fault took the lock away at once (see the module docs).
    pub cut: bool,
    /// A hold under way when the fault began and still held a session timeout later must
    /// have ended with a loss notice.
    pub expect_loss: bool,
    /// A hold under way when the fault began must not write after `end_ns` at all (a frozen
    /// process that checks `is_lost()` before each write, resumed past its session timeout).
    pub no_writes_after_end: bool,
}

/// Where a contender is, for fault injectors.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Status {
    Waiting,
    Holding { path: String },
}

/// Everything recorded about one recipe run.
#[derive(Debug, Default)]
pub struct Journal {
    pub holds: Vec<Hold>,
    /// Acquire calls: (who, called at, answered at).
    pub waits: Vec<(String, u64, u64)>,
    /// When a fault was under way (from its start to its end), whoever it hit.
    pub faults: Vec<(u64, u64)>,
    pub writes: Vec<Write>,
    /// Guarded writes ZooKeeper applied: (the write's zxid, the writer's token, who).
    pub guarded: Vec<(i64, i64, String)>,
    /// Guarded writes refused because the lock was lost.
    pub guarded_refused: usize,
    pub errors: Vec<(String, Error)>,
    pub hangs: Vec<String>,
    pub windows: Vec<Window>,
    /// Failures found outside the history (a child that never said it lost, ...).
    pub failures: Vec<String>,
}

/// One recipe's run within a fault scenario.
pub struct Run {
    pub recipe: Recipe,
    pub dir: String,
    pub journal: Mutex<Journal>,
    pub live: Mutex<BTreeMap<String, Status>>,
}

impl Run {
    pub fn new(recipe: Recipe, dir: String) -> Arc<Run> {
        Arc::new(Run {
            recipe,
            dir,
            journal: Mutex::new(Journal::default()),
            live: Mutex::new(BTreeMap::new()),
        })
    }

    pub fn journal(&self) -> std::sync::MutexGuard<'_, Journal> {
        self.journal.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn set_status(&self, who: &str, status: Option<Status>) {
        let mut live = self.live.lock().unwrap_or_else(|p| p.into_inner());
        match status {
            Some(s) => {
                live.insert(who.to_string(), s);
            }
            None => {
                live.remove(who);
            }
        }
    }

    pub fn status(&self, who: &str) -> Option<Status> {
        self.live
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(who)
            .cloned()
    }

    pub fn window(&self, w: Window) {
        let mut j = self.journal();
        j.faults.push((w.start_ns, w.end_ns));
        j.windows.push(w);
    }

    /// A fault that hit no contender in particular (a server killed under all of them).
    pub fn fault_period(&self, start_ns: u64, end_ns: u64) {
        self.journal().faults.push((start_ns, end_ns));
    }

    pub fn failure(&self, what: String) {
        self.journal().failures.push(what);
    }
}

/// One contender: a session and a recipe handle on the run's directory.
pub struct Contender {
    pub who: String,
    pub idx: usize,
    pub session: Session,
    pub handle: Handle,
    /// The proxy this contender connects through, if it has its own.
    pub proxy: Option<FaultProxy>,
    /// Drop the connection right after the create of each acquire was sent.
    pub flaky: bool,
}

/// How a contender connects.
#[derive(Debug, Clone, Default)]
pub struct Connect {
    /// The connect string, if not through a proxy of its own.
    pub hosts: String,
    /// A proxy of its own to this server address.
    pub proxy_to: Option<std::net::SocketAddr>,
    pub requeue: bool,
    pub flaky: bool,
    /// The contender's locks are revocable (`with_revocable(true)`): it lets go when asked.
    pub revocable: bool,
}

impl Contender {
    pub async fn connect(run: &Run, who: String, idx: usize, how: Connect) -> Arc<Contender> {
        let proxy = how
            .proxy_to
            .map(|addr| FaultProxy::start(addr).expect("start a fault proxy"));
        let hosts = match &proxy {
            Some(p) => p.addr().to_string(),
            None => how.hosts.clone(),
        };
        let session = tokio::time::timeout(
            Duration::from_secs(30),
            Session::builder(&hosts)
                .with_session_timeout(SESSION_TIMEOUT)
                .connect(),
        )
        .await
        .unwrap_or_else(|_| panic!("expected {who} to connect to {hosts} within 30s"))
        .unwrap_or_else(|e| panic!("{who} could not connect to {hosts}: {e}"));
        let handle =
            Handle::new(run.recipe, &session, &run.dir, &who, how.requeue).revocable(how.revocable);
        Arc::new(Contender {
            who,
            idx,
            session,
            handle,
            proxy,
            flaky: how.flaky,
        })
    }
}

/// When a holder lets go.
#[derive(Clone)]
pub enum Release {
    After(Duration),
    /// When the token is cancelled (victims hold until the fault is over), at most `ACQUIRE_DEADLINE`.
    On(CancellationToken),
}

/// One acquire-hold-release cycle, recorded in the run's journal.
pub async fn cycle(run: Arc<Run>, c: Arc<Contender>, write: bool, release: Release) {
    let kind = run.recipe.kind(write);
    run.set_status(&c.who, Some(Status::Waiting));
    let wait_start = monotonic_nanos();
    let acquired = {
        let mut acquire = Box::pin(c.handle.acquire(write));
        if c.flaky {
            if let Some(proxy) = &c.proxy {
                // Send the create, then cut the connection under it: before it reaches the
                // server, while the server works on it, or after the answer left.
                if let std::task::Poll::Ready(r) = futures::poll!(&mut acquire) {
                    Some(r)
                } else {
                    let jitter = Duration::from_micros(monotonic_nanos() % 4000);
                    tokio::time::sleep(jitter).await;
                    proxy.drop_connections();
                    tokio::time::timeout(ACQUIRE_DEADLINE, acquire).await.ok()
                }
            } else {
                tokio::time::timeout(ACQUIRE_DEADLINE, acquire).await.ok()
            }
        } else {
            tokio::time::timeout(ACQUIRE_DEADLINE, acquire).await.ok()
        }
    };
    run.journal()
        .waits
        .push((c.who.clone(), wait_start, monotonic_nanos()));
    let held = match acquired {
        None => {
            run.set_status(&c.who, None);
            run.journal().hangs.push(c.who.clone());
            return;
        }
        Some(Err(e)) => {
            run.set_status(&c.who, None);
            run.journal().errors.push((c.who.clone(), e));
            return;
        }
        Some(Ok(held)) => held,
    };
    let acquired_ns = monotonic_nanos();
    let token = held.fencing_token();
    let writer = writes_to_store(kind);
    run.set_status(
        &c.who,
        Some(Status::Holding {
            path: held.path().to_string(),
        }),
    );
    // Guarded writes (exclusive kinds): the token into a node of ZooKeeper's own, applied only
    // while the lock is still ours; one at a time, polled beside the loss signal.
    let guarded_node = format!("{}-guarded", run.dir);
    let mut node_made = false;
    let mut pending: Option<GuardedWrite<'_>> = None;
    let write_now = |ns: u64| {
        if writer {
            run.journal().writes.push(Write {
                ns,
                token,
                who: c.who.clone(),
            });
        }
    };
    write_now(acquired_ns);
    let lost = held.lost();
    tokio::pin!(lost);
    // A revocable holder lets go when asked (a normal release, never a loss).
    let revoked = held.revoke_requested();
    tokio::pin!(revoked);
    let until = async {
        match &release {
            Release::After(d) => tokio::time::sleep(*d).await,
            Release::On(t) => {
                let _ = tokio::time::timeout(ACQUIRE_DEADLINE, t.cancelled()).await;
            }
        }
    };
    tokio::pin!(until);
    let mut tick = tokio::time::interval(WRITE_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    tick.tick().await; // the first tick is immediate: the write at acquisition covers it
    let was_lost = loop {
        tokio::select! {
            biased;
            _ = &mut lost => break true,
            _ = &mut until => break false,
            _ = &mut revoked => break false,
            r = async { pending.as_mut().expect("polled only when set").await }, if pending.is_some() => {
                pending = None;
                match r {
                    Ok(results) => {
                        node_made = true;
                        let zxid = results.iter().find_map(|r| match r {
                            zk::MultiWriteResult::SetData { stat } => Some(stat.mzxid),
                            zk::MultiWriteResult::Create { stat, .. } => Some(stat.mzxid),
                            _ => None,
                        });
                        if let Some(zxid) = zxid {
                            run.journal().guarded.push((zxid, token, c.who.clone()));
                        }
                    }
                    Err(Error::LockLost(_)) => run.journal().guarded_refused += 1,
                    Err(Error::TransactionFailed { source: zk::Error::NoNode, .. }) => node_made = false,
                    Err(Error::TransactionFailed { source: zk::Error::NodeExists, .. }) => node_made = true,
                    // A connection error under a fault: the outcome is unknown, and the
                    // checker only orders what was applied and answered.
                    Err(_) => {}
                }
            }
            _ = tick.tick() => {
                write_now(monotonic_nanos());
                if writer && pending.is_none() {
                    let op = if node_made {
                        zk_recipes::Op::set_data(&guarded_node, token.to_string(), None)
                    } else {
                        zk_recipes::Op::create(&guarded_node, token.to_string())
                    };
                    pending = Some(Box::pin(held.guarded(vec![op])));
                }
            }
        }
    };
    drop(pending);
    let released_ns = monotonic_nanos();
    run.set_status(&c.who, None);
    run.journal().holds.push(Hold {
        who: c.who.clone(),
        kind,
        acquired_ns,
        released_ns,
        token,
        lost: was_lost,
    });
    if was_lost {
        drop(held);
        return;
    }
    match tokio::time::timeout(Duration::from_secs(30), held.release()).await {
        Ok(Ok(())) | Ok(Err(Error::LockLost(_))) => {}
        Ok(Err(e)) => run.journal().errors.push((c.who.clone(), e)),
        Err(_) => run.journal().hangs.push(format!("{} (release)", c.who)),
    }
}

/// One line of the table.
#[derive(Debug, Clone)]
pub struct Row {
    pub fault: String,
    pub recipe: &'static str,
    pub rounds: usize,
    pub acquisitions: usize,
    pub errors: usize,
    pub losses: usize,
    pub fenced: usize,
    /// Guarded writes applied, and refused because the lock was lost.
    pub guarded: (usize, usize),
    pub violations: Vec<String>,
    pub hangs: Vec<String>,
    pub leaked: Vec<String>,
    pub error_kinds: BTreeMap<String, usize>,
    /// The longest time the lock (or a permit) sat free while a contender waited, outside
    /// the faults and the session timeouts that follow them.
    pub idle_ns: u64,
}

impl Row {
    pub fn is_clean(&self) -> bool {
        self.violations.is_empty()
            && self.hangs.is_empty()
            && self.leaked.is_empty()
            && self.idle_ns <= LIVENESS_BOUND.as_nanos() as u64
    }

    /// The errors by kind, e.g. `SessionExpired 4`.
    pub fn error_summary(&self) -> String {
        let kinds: Vec<String> = self
            .error_kinds
            .iter()
            .map(|(k, n)| format!("{k} {n}"))
            .collect();
        kinds.join(", ")
    }

    /// `CHAOS-ROW|fault|recipe|rounds|acquisitions|errors|lost|fenced|violations|hangs|leaked|idle ms|error kinds|guarded applied|guarded refused`
    pub fn line(&self) -> String {
        format!(
            "CHAOS-ROW|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}",
            self.fault,
            self.recipe,
            self.rounds,
            self.acquisitions,
            self.errors,
            self.losses,
            self.fenced,
            self.violations.len(),
            self.hangs.len(),
            self.leaked.len(),
            self.idle_ns / 1_000_000,
            self.error_summary(),
            self.guarded.0,
            self.guarded.1
        )
    }

    pub fn details(&self) -> String {
        let mut s = format!(
            "{} / {}: {} acquisitions, errors {:?}, longest idle while waited {} ms (bound {:?})",
            self.fault,
            self.recipe,
            self.acquisitions,
            self.error_kinds,
            self.idle_ns / 1_000_000,
            LIVENESS_BOUND
        );
        for (what, list) in [
            ("violation", &self.violations),
            ("hang", &self.hangs),
            ("leaked node", &self.leaked),
        ] {
            for v in list.iter().take(30) {
                s.push_str(&format!("\n  {what}: {v}"));
            }
            if list.len() > 30 {
                s.push_str(&format!("\n  ... and {} more {what}s", list.len() - 30));
            }
        }
        s
    }
}

/// An error a contender may get under faults: the recipe's documented, typed answers.
fn clear_error(e: &Error) -> bool {
    matches!(
        e,
        Error::SessionExpired | Error::LockLost(_) | Error::ConnectionLost
    )
}

fn error_kind(e: &Error) -> String {
    let s = format!("{e:?}");
    s.split(|c: char| !c.is_alphanumeric())
        .next()
        .unwrap_or("?")
        .to_string()
}

/// Checks a run's journal (see the module docs) and makes its table row.
pub fn evaluate(run: &Run, fault: &str, rounds: usize, leaked: Vec<String>) -> Row {
    let j = run.journal();
    let mut violations = j.failures.clone();
    // 1. Trusted part of each hold; expected loss notices.
    let mut cuts: Vec<Option<u64>> = Vec::with_capacity(j.holds.len());
    let mut events = Vec::with_capacity(j.holds.len());
    for h in &j.holds {
        let mut cut: Option<u64> = None;
        for w in j.windows.iter().filter(|w| w.who == h.who) {
            // Told by then: the Grace deadline is within a session timeout of the last answer,
            // and a forced loss is reported on the next answer (the reconnect).
            let tell_by = w.start_ns + SESSION_TIMEOUT.as_nanos() as u64;
            let held_past = h.acquired_ns < w.start_ns && h.released_ns > tell_by;
            if w.expect_loss && held_past && !h.lost {
                violations.push(format!(
                    "{} held from {} through \"{}\" (from {}) and released at {} without being told it lost the lock",
                    h.who, h.acquired_ns, w.what, w.start_ns, h.released_ns
                ));
            }
            // A fault that took the lock away did so at an unknown moment inside its window:
            // a hold overlapping it is trusted up to the window's start if it was told of the
            // loss, or if it ended before it had to be told (an administrator's delete and a
            // normal release can cross: the next holder may be granted a moment before the
            // old one's release, which had no way to know yet).
            if w.cut
                && h.acquired_ns <= w.end_ns
                && h.released_ns >= w.start_ns
                && (h.lost || h.released_ns <= tell_by)
            {
                let at = w.start_ns.max(h.acquired_ns);
                cut = Some(cut.map_or(at, |c| c.min(at)));
            }
        }
        cuts.push(cut);
        let mut e = Event::new(
            h.who.clone(),
            h.kind,
            h.acquired_ns,
            cut.map_or(h.released_ns, |c| c.min(h.released_ns)),
        );
        // A hold granted inside a fault that took the lock away (an administrator deleting the
        // nodes) and then reported lost has no trusted part: the node may already have been
        // deleted when the grant reached the caller, which learns it from lost()/is_lost().
        // Fencing is what protects the store then (the store check below still applies), so
        // such a hold takes no place in the token order.
        let trusted = cut.is_none_or(|c| c > h.acquired_ns);
        if writes_to_store(h.kind) && trusted {
            e = e.with_token(h.token);
        }
        events.push(e);
    }
    let report = if run.recipe == Recipe::Sem {
        check_semaphore(&events, PERMITS)
    } else {
        check(&events)
    };
    violations.extend(report.overlaps.iter().map(|v| format!("overlap: {v}")));
    violations.extend(
        report
            .token_violations
            .iter()
            .map(|v| format!("token: {v}")),
    );
    violations.extend(
        report
            .order_violations
            .iter()
            .map(|v| format!("malformed: {v}")),
    );
    // 2. The store: replay the writes in time order; a write is accepted if its token is at
    //    least the largest seen. A refused write must come from the untrusted tail of a cut hold.
    let mut writes = j.writes.clone();
    writes.sort_by_key(|w| (w.ns, w.token));
    let mut max: Option<(i64, String, u64)> = None;
    let mut fenced = 0;
    for w in &writes {
        let hold = j
            .holds
            .iter()
            .zip(&cuts)
            .find(|(h, _)| h.who == w.who && h.token == w.token);
        let cut = hold.and_then(|(_, c)| *c);
        let accepted = max.as_ref().is_none_or(|(m, _, _)| w.token >= *m);
        if accepted {
            max = Some((w.token, w.who.clone(), w.ns));
            continue;
        }
        match cut {
            Some(c) if w.ns >= c => fenced += 1,
            _ => {
                let (m, by, at) = max.clone().unwrap();
                violations.push(format!(
                    "the store refused a write by {} (token {}) at {} inside its trusted hold: {} had written token {} at {}",
                    w.who, w.token, w.ns, by, m, at
                ));
            }
        }
    }
    // 3. A careful holder frozen past its session timeout must not write once resumed.
    for win in j.windows.iter().filter(|w| w.no_writes_after_end) {
        for h in j.holds.iter().filter(|h| {
            h.who == win.who && h.acquired_ns < win.start_ns && h.released_ns > win.start_ns
        }) {
            let late: Vec<u64> = j
                .writes
                .iter()
                .filter(|w| w.who == h.who && w.token == h.token && w.ns > win.end_ns)
                .map(|w| w.ns)
                .collect();
            if !late.is_empty() {
                violations.push(format!(
                    "{} wrote with its old token {} at {late:?}, after it resumed at {} from \"{}\" past its session timeout, although it checks is_lost() before each write",
                    h.who, h.token, win.end_ns, win.what
                ));
            }
        }
    }
    // 4. Guarded writes: ZooKeeper applied them in zxid order, and only while the writer's
    //    lock was still its own, so their tokens never go down (a deposed holder's write
    //    applied after a newer holder's would).
    let mut guarded = j.guarded.clone();
    guarded.sort();
    for w in guarded.windows(2) {
        if w[1].1 < w[0].1 {
            violations.push(format!(
                "a guarded write by {} (token {}) was applied at zxid {:#x}, after one by {} (token {}) at zxid {:#x}",
                w[1].2, w[1].1, w[1].0, w[0].2, w[0].1, w[0].0
            ));
        }
    }
    // 5. Errors must be typed answers to the faults.
    let mut error_kinds = BTreeMap::new();
    for (who, e) in &j.errors {
        *error_kinds.entry(error_kind(e)).or_insert(0) += 1;
        if !clear_error(e) {
            violations.push(format!("{who} got an unexpected error: {e:?} ({e})"));
        }
    }
    Row {
        fault: fault.to_string(),
        recipe: run.recipe.name(),
        rounds,
        acquisitions: j.holds.len(),
        errors: j.errors.len(),
        losses: j.holds.iter().filter(|h| h.lost).count(),
        fenced,
        guarded: (j.guarded.len(), j.guarded_refused),
        violations,
        hangs: j.hangs.clone(),
        leaked,
        error_kinds,
        idle_ns: idle_while_waiting(&j, run.recipe),
    }
}

/// Liveness: the longest stretch during which the lock was free (no holder; for the
/// semaphore, fewer than `PERMITS`) while some contender was waiting in an acquire, leaving
/// out each fault and the three session timeouts after it (recovery is the fault's).
fn idle_while_waiting(j: &Journal, recipe: Recipe) -> u64 {
    let capacity = if recipe == Recipe::Sem { PERMITS } else { 1 };
    let settle = 3 * SESSION_TIMEOUT.as_nanos() as u64;
    let excluded: Vec<(u64, u64)> = j
        .faults
        .iter()
        .map(|&(a, b)| (a, b.saturating_add(settle)))
        .collect();
    let mut points: Vec<u64> = j
        .holds
        .iter()
        .flat_map(|h| [h.acquired_ns, h.released_ns])
        .chain(j.waits.iter().flat_map(|w| [w.1, w.2]))
        .chain(excluded.iter().flat_map(|e| [e.0, e.1]))
        .collect();
    points.sort_unstable();
    points.dedup();
    let inside = |t: u64, (a, b): (u64, u64)| a <= t && t < b;
    let (mut longest, mut run_start) = (0u64, None::<u64>);
    for pair in points.windows(2) {
        let (t, next) = (pair[0], pair[1]);
        let held = j
            .holds
            .iter()
            .filter(|h| inside(t, (h.acquired_ns, h.released_ns)))
            .count();
        let waiting = j.waits.iter().any(|w| inside(t, (w.1, w.2)));
        let faulty = excluded.iter().any(|&e| inside(t, e));
        if held < capacity && waiting && !faulty {
            let start = *run_start.get_or_insert(t);
            longest = longest.max(next - start);
        } else {
            run_start = None;
        }
    }
    longest
}

/// Lists the children of `dir` (none if it is missing).
pub async fn children(client: &zk::Client, dir: &str) -> Result<Vec<String>, zk::Error> {
    match client.list_children(dir).await {
        Ok(c) => Ok(c),
        Err(zk::Error::NoNode) => Ok(Vec::new()),
        Err(e) => Err(e),
    }
}
