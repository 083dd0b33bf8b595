//! A contender in its own process, for the "process paused" faults of `tests/chaos.rs` (a test
//! can SIGSTOP a process, not a task).
//!
//! ```text
//! cargo run --features testing --bin chaos_child -- CONNECT RECIPE PATH ROUNDS HOLD_MS [SESSION_TIMEOUT_MS]
//! ```
//!
//! `RECIPE` is `fair`, `sem` (2 permits), `read`, `write`, `elect` or `multi` (`PATH/a` and
//! `PATH/b`). The child takes the lock
//! `ROUNDS` times and holds it `HOLD_MS` each time, unless it is told it lost it. It prints the
//! line protocol of `tests/interop/Interop.java` on stdout, one flushed line per event, with
//! CLOCK_MONOTONIC nanosecond timestamps ([`zk_recipes::testing::monotonic_nanos`]):
//!
//! ```text
//! READY                                   connected
//! REQ <ns> <kind> <id>                    about to acquire
//! ACQ <ns> <kind> <id> <node> <token>     acquired; <token> is the fencing token
//! WRITE <ns> <token>                      a write to the protected store, every 50 ms while held
//! REL <ns> <kind> <id> [lost]             about to release, or ("lost") the hold was lost
//! ERR <message>                           failure (exit status 1)
//! DONE                                    finished normally
//! ```
//!
//! `<kind>` is `lock`, `sem`, `read`, `write` or `latch`. The session uses the default `Grace`
//! loss policy, and the child checks `is_lost()` before each write: after a pause longer than
//! the session timeout it reports `REL … lost` as soon as it runs again. A `WRITE` that slipped
//! through would carry its old token, which the test's token-checking store refuses.

use std::io::Write;
use std::time::Duration;

use zk_recipes::testing::monotonic_nanos;
use zk_recipes::{Election, ExclusiveLock, FairLock, MultiLock, RwLock, Semaphore, Session};

#[path = "../support/held.rs"]
#[allow(dead_code)] // guarded writes are the suite's, not the victim's
mod held;
use held::Held;

/// Permits of the `sem` recipe (the chaos suite uses the same number).
const PERMITS: usize = 2;
/// How often a holder writes to the store.
const WRITE_EVERY: Duration = Duration::from_millis(50);

fn out(line: &str) {
    let mut stdout = std::io::stdout().lock();
    let _ = writeln!(stdout, "{line}");
    let _ = stdout.flush();
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage = "ERR usage: chaos_child CONNECT fair|sem|read|write|elect PATH ROUNDS HOLD_MS [SESSION_TIMEOUT_MS]";
    if args.len() < 5 {
        out(usage);
        std::process::exit(2);
    }
    let (Ok(rounds), Ok(hold_ms)) = (args[3].parse::<u32>(), args[4].parse::<u64>()) else {
        out(usage);
        std::process::exit(2);
    };
    let timeout_ms: u64 = args.get(5).and_then(|s| s.parse().ok()).unwrap_or(4000);
    let config = Config {
        connect: args[0].clone(),
        recipe: args[1].clone(),
        path: args[2].clone(),
        rounds,
        hold: Duration::from_millis(hold_ms),
        session_timeout: Duration::from_millis(timeout_ms),
    };
    match run(config).await {
        Ok(()) => out("DONE"),
        Err(err) => {
            out(&format!("ERR {}", err.to_string().replace('\n', " ")));
            std::process::exit(1);
        }
    }
}

struct Config {
    connect: String,
    recipe: String,
    path: String,
    rounds: u32,
    hold: Duration,
    session_timeout: Duration,
}

/// The recipe handle.
enum Handle {
    Simple(ExclusiveLock),
    Fair(FairLock),
    Sem(Semaphore),
    Read(RwLock),
    Write(RwLock),
    Elect(Election),
    Multi(MultiLock),
}

impl Handle {
    fn new(session: &Session, recipe: &str, path: &str, id: &str) -> zk_recipes::Result<Handle> {
        Ok(match recipe {
            "simple" => {
                Handle::Simple(ExclusiveLock::new(session, format!("{path}/lock"))?.with_data(id))
            }
            "fair" => Handle::Fair(FairLock::new(session, path)?.with_data(id)),
            "sem" => Handle::Sem(Semaphore::new(session, path, PERMITS)?.with_data(id)),
            "read" => Handle::Read(RwLock::new(session, path)?.with_data(id)),
            "write" => Handle::Write(RwLock::new(session, path)?.with_data(id)),
            "elect" => Handle::Elect(Election::new(session, path, id)?),
            // The chaos suite's multi-lock run: `PATH/a` and `PATH/b`, named in reverse.
            "multi" => Handle::Multi(
                MultiLock::new(session, [format!("{path}/b"), format!("{path}/a")])?.with_data(id),
            ),
            other => {
                return Err(zk_recipes::Error::InvalidArgument(format!(
                    "unknown recipe {other:?}: use simple, fair, sem, read, write, elect or multi"
                )))
            }
        })
    }

    /// The kind word of the line protocol.
    fn kind(&self) -> &'static str {
        match self {
            Handle::Simple(_) | Handle::Fair(_) | Handle::Multi(_) => "lock",
            Handle::Sem(_) => "sem",
            Handle::Read(_) => "read",
            Handle::Write(_) => "write",
            Handle::Elect(_) => "latch",
        }
    }

    /// Whether a holder alone may write to the store.
    fn writes(&self) -> bool {
        matches!(
            self,
            Handle::Simple(_)
                | Handle::Fair(_)
                | Handle::Write(_)
                | Handle::Elect(_)
                | Handle::Multi(_)
        )
    }

    async fn acquire(&self) -> zk_recipes::Result<Held> {
        if let Handle::Multi(m) = self {
            return Ok(Held::Many(m.lock().await?));
        }
        Ok(Held::one(match self {
            Handle::Simple(l) => l.lock().await?,
            Handle::Fair(l) => l.lock().await?,
            Handle::Sem(s) => s.acquire().await?,
            Handle::Read(l) => l.read().await?.into(),
            Handle::Write(l) => l.write().await?.into(),
            Handle::Elect(e) => e.campaign().await?.into(),
            Handle::Multi(_) => unreachable!("taken above"),
        }))
    }
}

async fn run(config: Config) -> zk_recipes::Result<()> {
    let id = format!("child-{}", std::process::id());
    let session = Session::builder(&config.connect)
        .with_session_timeout(config.session_timeout)
        .connect()
        .await?;
    let handle = Handle::new(&session, &config.recipe, &config.path, &id)?;
    let kind = handle.kind();
    out("READY");
    for _ in 0..config.rounds {
        out(&format!("REQ {} {kind} {id}", monotonic_nanos()));
        let held = handle.acquire().await?;
        let token = held.fencing_token();
        let node = held.path().rsplit('/').next().unwrap_or("-").to_string();
        out(&format!(
            "ACQ {} {kind} {id} {node} {token}",
            monotonic_nanos()
        ));
        let lost = held.lost();
        tokio::pin!(lost);
        let until = tokio::time::sleep(config.hold);
        tokio::pin!(until);
        let mut tick = tokio::time::interval(WRITE_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        loop {
            tokio::select! {
                biased;
                _ = &mut lost => {
                    out(&format!("REL {} {kind} {id} lost", monotonic_nanos()));
                    drop(held);
                    break;
                }
                _ = &mut until => {
                    out(&format!("REL {} {kind} {id}", monotonic_nanos()));
                    if let Err(err) = held.release().await {
                        // Lost between the deadline and the release: the hold already ended.
                        eprintln!("chaos_child {id}: release: {err}");
                    }
                    break;
                }
                _ = tick.tick() => {
                    // The careful pattern: look before each write. After a pause past the
                    // session timeout this says "lost" even before the session manager has
                    // run; a write that slips through anyway is refused by the store.
                    if held.is_lost() {
                        out(&format!("REL {} {kind} {id} lost", monotonic_nanos()));
                        drop(held);
                        break;
                    }
                    if handle.writes() {
                        out(&format!("WRITE {} {token}", monotonic_nanos()));
                    }
                }
            }
        }
    }
    session.close().await;
    Ok(())
}
