//! Releases parked by dropped guards, for a merge with the next acquire (see the queue's
//! `Holding::with_merge`).
//!
//! A dropped fair-lock or read/write guard does not send its release at once: it parks it
//! here, one slot per lock directory of a session, so that an acquire of the same kind made
//! right after the drop (a worker loop: lock, work, drop the guard, lock) takes it back and
//! sends it with its own create in one transaction. Two things send a release that nobody
//! took back:
//!
//! * **the flush task**, spawned by the drop on the session's own runtime: it yields twice,
//!   which leaves the dropping task the few microseconds it needs to reach its next acquire,
//!   then sends the release, if it runs on the thread that dropped the guard. There it ran
//!   after the dropping task's poll ended (a task spawned from a worker waits in that
//!   worker's LIFO slot; on a current-thread runtime everything waits for the one thread).
//!   On another thread the dropping code may still be on its way to its next acquire: the
//!   body of `block_on` or `#[tokio::main]`, which no worker runs, so the task started at
//!   once on a worker beside it, and sent the release first in about a fifth of a worker
//!   loop's iterations (2026-12-02: 1.2 log syncs per iteration where it was 1.0 while the
//!   guard's monitor task, woken by the drop, happened to hold the flush task back). It
//!   then leaves the release to the deadline thread, [`AWAY`] after it found itself there
//!   (and [`DEADLINE`] after the drop at the latest). A task's drop whose flush task another
//!   worker stole while it yielded waits the same; and
//! * **the deadline thread**, at the latest [`DEADLINE`] after the drop, whatever the
//!   dropping thread does meanwhile. A task spawned from a multi-thread runtime's worker waits
//!   in that worker's LIFO slot, which no other worker steals: a task that blocks its thread
//!   right after the drop (any synchronous call) held the flush task, and so the lock, for as
//!   long as it blocked, and forever if the call waited for something that needed the lock.
//!   The deadline thread is a plain thread of this process, which no runtime schedules.
//!
//! Whoever sends it, a release is sent under the table's lock (its holding is dropped there,
//! which queues the release on the session), so an acquire that finds the slot empty sends
//! its create after the release, never before it.

use std::any::Any;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock, PoisonError, Weak};
use std::time::{Duration, Instant};

// Every change under this module's locks is one insert, remove or pop, whole before anything
// that may panic (a parked release's drop) runs.
use crate::locked;

/// A parked release: the queue module's dropped holding, whose own `Drop` releases it.
pub(crate) type Parked = Box<dyn Any + Send>;

/// How long a parked release waits at most, whatever the dropping thread does. The deadline
/// thread sends every release parked at least half as long when it wakes, so a worker loop's
/// many drops cost it one wake-up per millisecond, not one per drop.
pub(crate) const DEADLINE: Duration = Duration::from_millis(2);

/// How many times the flush task yields before it sends the release.
const FLUSH_YIELDS: usize = 2;

/// How long a release parked by code that the flush task may run beside (found on another
/// thread than the drop's) waits for an acquire to take it back: long enough for the dropping
/// code to reach its next `lock()` unless its thread is taken from it, short enough that a
/// drop with no acquire after it holds the lock little longer than a task's drop does.
pub(crate) const AWAY: Duration = Duration::from_micros(200);

#[cfg(feature = "testing")]
pub(crate) use deadlines::never_start as without_deadline_thread;

/// The parked releases of one session, by lock directory.
#[derive(Default)]
pub(crate) struct Table {
    slots: Mutex<HashMap<String, (u64, Parked)>>,
    next_ticket: AtomicU64,
}

impl Table {
    /// Parks `item` under `key` (its lock's directory) until an acquire takes it back
    /// ([`unpark`](Self::unpark)), the flush task runs on `home`, or the [`DEADLINE`] passes.
    /// A release parked under `key` before (another guard of the directory dropped earlier in
    /// the same poll) is sent at once, under the lock. The item's own `Drop` must release it:
    /// an item still parked when the session ends is dropped with the table.
    pub(crate) fn park(
        self: &Arc<Table>,
        key: String,
        item: Parked,
        home: &tokio::runtime::Handle,
        tracker: &tokio_util::task::TaskTracker,
    ) {
        let ticket = self.next_ticket.fetch_add(1, Ordering::Relaxed);
        drop(locked(&self.slots).insert(key.clone(), (ticket, item)));
        deadlines::add(Arc::downgrade(self), key.clone(), ticket, DEADLINE);
        let table = self.clone();
        let dropper = std::thread::current().id();
        // On the session's own runtime: a task spawned on the dropping thread's runtime never
        // ran when that runtime ended, or was not driven again, right after the drop (a guard
        // dropped in a sync wrapper's `block_on`, or by a task of a runtime shutting down).
        tracker.spawn_on(
            async move {
                // Spawned from a thread that is not one of the runtime's workers (the body of
                // `block_on`, `#[tokio::main]`, another runtime), this task may start on a
                // worker at once, beside the code that dropped the guard.
                for _ in 0..FLUSH_YIELDS {
                    tokio::task::yield_now().await;
                }
                if std::thread::current().id() == dropper {
                    table.flush(&key, ticket);
                } else if table.is_parked(&key, ticket)
                    && !deadlines::add(Arc::downgrade(&table), key.clone(), ticket, AWAY)
                {
                    // No deadline thread to wait for: sent now, merge or not, rather than
                    // left parked until an acquire of the directory or the session's end.
                    table.flush(&key, ticket);
                }
            },
            home,
        );
    }

    /// Takes back the release parked under `key`, if `wanted` accepts it: for an acquire to
    /// merge with its create, or to send first.
    pub(crate) fn unpark(&self, key: &str, wanted: impl FnOnce(&Parked) -> bool) -> Option<Parked> {
        let mut slots = locked(&self.slots);
        let (_, item) = slots.get(key)?;
        wanted(item)
            .then(|| slots.remove(key).map(|(_, item)| item))
            .flatten()
    }

    /// Whether the release parked under `key` with `ticket` is still there.
    fn is_parked(&self, key: &str, ticket: u64) -> bool {
        locked(&self.slots)
            .get(key)
            .is_some_and(|(t, _)| *t == ticket)
    }

    /// Sends the release parked under `key` with `ticket`, unless it was taken back or sent
    /// already. It is dropped, and so queued on the session, under the lock: taken out first
    /// and dropped after, it could be queued behind the create and listing of an acquire that
    /// looked in between, whose listing then showed the dropped guard's node (a `try_lock`
    /// right after the drop answered `WouldBlock`).
    fn flush(&self, key: &str, ticket: u64) {
        let mut slots = locked(&self.slots);
        if slots.get(key).is_some_and(|(t, _)| *t == ticket) {
            drop(slots.remove(key));
        }
    }
}

/// The deadline thread and its queue, one for the process.
mod deadlines {
    use super::*;

    /// A parked release and when it is due: sent at `due` at the latest, and by any wake-up
    /// of the thread from `ripe` on (half its delay after it was parked), so that a worker
    /// loop's many drops cost the thread one wake-up per [`DEADLINE`], not one per drop.
    struct Due {
        ripe: Instant,
        due: Instant,
        table: Weak<Table>,
        key: String,
        ticket: u64,
    }

    /// In the order they were handed over; two delays ([`DEADLINE`], [`AWAY`]), so not
    /// quite in deadline order.
    static QUEUE: Mutex<VecDeque<Due>> = Mutex::new(VecDeque::new());
    static WAKE: Condvar = Condvar::new();
    /// Whether the thread runs (it is started by the first park).
    static RUNNING: OnceLock<bool> = OnceLock::new();

    /// Hands a parked release to the deadline thread, to be sent `delay` from now at the
    /// latest. `false` if there is no such thread (it could not be started): then nobody
    /// sends the release by its deadline, and the caller must see to it.
    pub(super) fn add(table: Weak<Table>, key: String, ticket: u64, delay: Duration) -> bool {
        let running = *RUNNING.get_or_init(|| {
            std::thread::Builder::new()
                .name("zk-recipes-parked".into())
                .spawn(run)
                .map_err(|err| {
                    tracing::error!(%err, "zk-recipes: cannot start the thread that bounds how long a dropped guard's release waits; it is sent by the flush task instead, which a task blocking its thread right after the drop holds back")
                })
                .is_ok()
        });
        if !running {
            return false;
        }
        let now = Instant::now();
        let due = now + delay;
        let mut queue = locked(&QUEUE);
        // Otherwise the thread already sleeps until an earlier deadline.
        let earliest = queue.iter().all(|d| d.due > due);
        queue.push_back(Due {
            ripe: now + delay / 2,
            due,
            table,
            key,
            ticket,
        });
        drop(queue);
        if earliest {
            WAKE.notify_one();
        }
        true
    }

    /// For tests: runs this process as if the thread could not be started. `false` if it
    /// runs already (a release was parked before).
    #[cfg(feature = "testing")]
    pub(crate) fn never_start() -> bool {
        RUNNING.set(false).is_ok()
    }

    fn run() {
        let mut queue = locked(&QUEUE);
        loop {
            let Some(due) = queue.iter().map(|d| d.due).min() else {
                queue = WAKE.wait(queue).unwrap_or_else(PoisonError::into_inner);
                continue;
            };
            let now = Instant::now();
            if due > now {
                queue = WAKE
                    .wait_timeout(queue, due - now)
                    .unwrap_or_else(PoisonError::into_inner)
                    .0;
                continue;
            }
            let (ripe, left): (Vec<Due>, Vec<Due>) = std::mem::take(&mut *queue)
                .into_iter()
                .partition(|d| d.ripe <= now);
            *queue = left.into();
            drop(queue);
            for d in ripe {
                // Most were sent or taken back long ago. A panic in a release must not take
                // the thread, and every later deadline, with it; nor one in the drop of the
                // table, if this was its last reference (its session is gone, and the drop
                // releases what is still parked in it).
                let sent = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    if let Some(table) = d.table.upgrade() {
                        table.flush(&d.key, d.ticket);
                    }
                }));
                if sent.is_err() {
                    tracing::error!(dir = d.key, "zk-recipes: sending a parked release panicked");
                }
            }
            queue = locked(&QUEUE);
        }
    }
}
