//! The fixes in our patched copy of `asyncs-sync` (`vendor/asyncs-sync`, see its `PATCHES.md`),
//! which `zookeeper-client` uses for every session's state channel: two `Notify` races (the
//! first three tests) and two races of the `watch` channel (the last two). None needs ZooKeeper.
//!
//! In asyncs-sync 0.4.0, dropping a `Notify` waiter just as `notify_all` wakes it wrote
//! through stale list links into `notify_all`'s finished stack frame and into other waiters.
//! The session-state channel's `publish` is a `notify_all`, and every `state_watcher().changed()`
//! future that a `select!` or an ending runtime drops is such a waiter: the session test binary
//! died of it once in CI (SIGSEGV, the instruction pointer on a dead stack frame whose two
//! words pointed at themselves, as that guard node's links do). Against the unpatched crate
//! each of the first two tests crashes the process or finds its stack changed within about a
//! second, in debug and in release builds.

use std::future::Future;
use std::hint::black_box;
use std::pin::pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::task::{Context, Wake, Waker};
use std::time::Duration;

use asyncs_sync::{watch, Notify};

/// How long each test races.
const RACE: Duration = Duration::from_secs(2);
/// Threads that make waiters and drop them.
const DROPPERS: usize = 3;

const PATTERN: usize = 0x5a5a_5a5a_5a5a_5a5a;

/// Lays a known pattern over the stack just below the caller's frame, where the notifier's
/// frame (and its guard node) was a moment before, waits a little, and says whether anything
/// wrote into it meanwhile: only a stale pointer into a dead frame can.
#[inline(never)]
fn stack_written_after_return() -> bool {
    let mut area = [PATTERN; 256];
    black_box(&mut area);
    for _ in 0..200 {
        std::hint::spin_loop();
    }
    black_box(&mut area);
    area.iter().any(|&w| w != PATTERN)
}

/// Runs `drop_one` on [`DROPPERS`] threads and `notify` on this one, for [`RACE`]; returns
/// (notifications sent, waiters dropped, notifications after which the notifier's dead frame
/// had been written).
fn race(drop_one: impl Fn() + Send + Sync + 'static, notify: impl Fn()) -> (u64, u64, u64) {
    let stop = Arc::new(AtomicBool::new(false));
    let dropped = Arc::new(AtomicU64::new(0));
    let drop_one = Arc::new(drop_one);
    let threads: Vec<_> = (0..DROPPERS)
        .map(|_| {
            let (stop, dropped, drop_one) = (stop.clone(), dropped.clone(), drop_one.clone());
            std::thread::spawn(move || {
                while !stop.load(Relaxed) {
                    drop_one();
                    // Vary the time between the waiter's first poll and its drop.
                    for _ in 0..(dropped.fetch_add(1, Relaxed) % 64) {
                        std::hint::spin_loop();
                    }
                }
            })
        })
        .collect();
    let deadline = std::time::Instant::now() + RACE;
    let (mut sent, mut written) = (0, 0);
    while std::time::Instant::now() < deadline {
        notify();
        if stack_written_after_return() {
            written += 1;
        }
        sent += 1;
    }
    stop.store(true, Relaxed);
    for t in threads {
        t.join().expect("a dropping thread panicked");
    }
    (sent, dropped.load(Relaxed), written)
}

#[test]
fn a_notify_waiter_dropped_while_notify_all_wakes_it_leaves_no_stale_write() {
    let notify: &'static Notify = Box::leak(Box::new(Notify::new()));
    let (sent, dropped, written) = race(
        move || {
            // Polled once (queued in the waiter list), then dropped.
            let mut waiter = pin!(notify.notified());
            let _ = waiter
                .as_mut()
                .poll(&mut Context::from_waker(Waker::noop()));
        },
        || notify.notify_all(),
    );
    println!("notify_all: {sent}, waiters dropped: {dropped}, stale writes seen: {written}");
    assert!(sent > 1000 && dropped > 1000, "the race barely ran");
    assert_eq!(
        written, 0,
        "a dropped waiter wrote into notify_all's returned stack frame"
    );
}

/// A waker that takes a little while, as a real one that moves a task between threads does:
/// it widens the window in which `notify_all` has let go of the lock to wake a batch.
struct SlowWaker;

impl Wake for SlowWaker {
    fn wake(self: Arc<Self>) {
        for _ in 0..500 {
            std::hint::spin_loop();
        }
    }
}

#[test]
fn waiters_dropped_while_notify_all_wakes_a_batch_keep_the_ring_whole() {
    // More than the 32 wakers `notify_all` wakes per batch, with the lock let go between
    // batches. A waiter removed then, at the ring's end, used to write through its stale link
    // into the waiter popped just before it (perhaps freed), and `notify_all` then popped the
    // removed one from freed memory: a crash, or an abort on a debug build's check.
    let notify: &'static Notify = Box::leak(Box::new(Notify::new()));
    // A ring broken into a cycle would spin for ever; fail instead.
    std::thread::spawn(|| {
        std::thread::sleep(Duration::from_secs(60));
        eprintln!("the notify_all batch race did not end within 60 s");
        std::process::abort();
    });
    let (sent, dropped, _) = race(
        move || {
            let waker = Waker::from(Arc::new(SlowWaker));
            let mut cx = Context::from_waker(&waker);
            let mut waiters: Vec<_> = (0..24).map(|_| Box::pin(notify.notified())).collect();
            for waiter in &mut waiters {
                let _ = waiter.as_mut().poll(&mut cx);
            }
            // Dropped in a scrambled order, so that ends and middles of the ring go.
            let mut i = 7;
            while !waiters.is_empty() {
                i = (i * 31 + 17) % waiters.len().max(1);
                drop(waiters.swap_remove(i % waiters.len()));
            }
        },
        || notify.notify_all(),
    );
    println!("notify_all: {sent}, rounds of 24 waiters dropped: {dropped}");
    assert!(sent > 1000 && dropped > 100, "the race barely ran");
}

#[test]
fn a_state_channel_changed_future_dropped_while_published_leaves_no_stale_write() {
    // The shape zookeeper-client's session-state channel is used in: the client publishes,
    // and a `changed()` that another select! branch beat is dropped.
    let (sender, receiver) = watch::channel(0u64);
    let next = AtomicU64::new(0);
    let (sent, dropped, written) = race(
        move || {
            let mut receiver = receiver.clone();
            let _ = receiver.borrow_and_update();
            let mut changed = pin!(receiver.changed());
            let _ = changed
                .as_mut()
                .poll(&mut Context::from_waker(Waker::noop()));
        },
        || sender.publish(next.fetch_add(1, Relaxed)),
    );
    println!("published: {sent}, changed() dropped: {dropped}, stale writes seen: {written}");
    assert!(sent > 1000 && dropped > 1000, "the race barely ran");
    assert_eq!(
        written, 0,
        "a dropped changed() wrote into publish's returned stack frame"
    );
}

/// A thread that publishes 1, 2, 3, ... on `sender` until `stop`; it returns its last value.
fn publish_until(
    sender: watch::Sender<u64>,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<u64> {
    std::thread::spawn(move || {
        let mut value = 0;
        while !stop.load(Relaxed) {
            value += 1;
            sender.publish(value);
        }
        value
    })
}

#[test]
fn a_state_channel_reader_sees_only_published_values_in_order() {
    // One publisher, as the session's client is. A reader that loaded the latest slot just
    // before the publisher freed and reused it for its next value used to get that value
    // before it was published: `has_changed()` then disagreed with the value, values went
    // backwards, or the reader panicked ("BUG: version is monotonic").
    let (sender, mut receiver) = watch::channel(0u64);
    let stop = Arc::new(AtomicBool::new(false));
    let publisher = publish_until(sender, stop.clone());
    let deadline = std::time::Instant::now() + RACE;
    let (mut reads, mut wrong, mut first_wrong) = (0u64, 0u64, None);
    let mut last = 0;
    while std::time::Instant::now() < deadline {
        let seen = *receiver.borrow_and_update();
        let now = receiver.borrow();
        let (value, changed) = (*now, now.has_changed());
        drop(now);
        if seen < last || value < seen || changed != (value != seen) {
            wrong += 1;
            first_wrong.get_or_insert((last, seen, value, changed));
        }
        last = seen;
        reads += 1;
    }
    stop.store(true, Relaxed);
    let published = publisher.join().expect("the publisher panicked");
    println!("published: {published}, reads: {reads}, wrong: {wrong}, first: {first_wrong:?}");
    assert!(published > 1000 && reads > 1000, "the race barely ran");
    assert_eq!(
        wrong, 0,
        "a reader saw an unpublished or older value (last, seen, then, has_changed): {first_wrong:?}"
    );
}

#[test]
fn a_state_channel_with_two_publishers_keeps_every_slot_consistent() {
    // `Sender` is `Clone + Sync`; two publishers at once used to take the same free slot
    // (its free list's pop is not safe for two), overwriting a live value: a debug build
    // panics in `Slot::store`'s check or in the reader's version check.
    let (sender, mut receiver) = watch::channel(0u64);
    let stop = Arc::new(AtomicBool::new(false));
    let publishers: Vec<_> = (0..2)
        .map(|_| publish_until(sender.clone(), stop.clone()))
        .collect();
    drop(sender);
    let deadline = std::time::Instant::now() + RACE;
    let mut reads = 0u64;
    while std::time::Instant::now() < deadline {
        let _ = *receiver.borrow_and_update();
        reads += 1;
    }
    stop.store(true, Relaxed);
    let sent: Vec<u64> = publishers
        .into_iter()
        .map(|p| p.join().expect("a publisher panicked"))
        .collect();
    println!("published: {sent:?}, reads: {reads}");
    let last = *receiver.borrow();
    assert!(
        sent.contains(&last),
        "the channel's last value {last} is neither publisher's last ({sent:?})"
    );
}
