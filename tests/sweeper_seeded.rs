//! Review 30: a seeded randomized attack on the sweeper of stuck nodes (src/queue/sweep.rs,
//! d1038d4 and 8e803b5). Three sessions (each behind a proxy of its own, which counts the
//! requests it forwards), two actors each, take and let go of a fair lock in each of two
//! directories, a multi-lock across both, a read/write lock, a semaphore of two and a simple
//! lock (timed, tried, or given up by dropping the future; released or dropped), while an
//! administrator flips DELETE on the directories, sets a directory's ACL to what it already
//! is (a version bump and nothing else), deletes random nodes by hand, makes random contender
//! nodes read-only and gives them their ACL back. A session may have its every handle dropped
//! without `close()`. At the end some actors wait (unbounded acquires started while the ACLs
//! were still broken). Then DELETE is given back everywhere and every node ACL restored, and
//! with no further acquire: every waiter must be granted; within 5 s every node of a live
//! session that no guard holds must be gone (only the sweeper can delete them); never two
//! holders; no guard told of a loss but one whose node the administrator deleted; the
//! administrator's and a foreign client's nodes survive; the sessions then send (nearly)
//! nothing over 3 s of quiet (the sweeper stopped).
//!
//! Runs seeds 1 and 2 and a new one each time. Replay one seed with `ZKR_REVIEW30_SEED=<seed>`;
//! `ZKR_REVIEW30_SEEDS=<n>` runs n seeds from `ZKR_REVIEW30_FIRST` (default 1).
mod support;

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use support::acl::{an_open_directory, children};
use support::zk::{admin, session_via_proxy};
use zk_recipes::testing::{shared_server, unique_root, FaultProxy};
use zk_recipes::{
    zk, Error, ExclusiveLock, FairLock, LockGuard, LossPolicy, MultiGuard, MultiLock, ReadGuard,
    RwLock, Semaphore, Session, WriteGuard,
};

/// Each node's ACL before the administrator made it read-only, by path and czxid.
type OriginalAcls = HashMap<(String, i64), Vec<zk::Acl>>;

fn perms(delete: bool) -> Vec<zk::Acl> {
    use zk::Permission as P;
    let p = if delete {
        P::ALL
    } else {
        P::CREATE | P::READ | P::WRITE
    };
    vec![zk::Acl::new(p, zk::AuthId::anyone())]
}

fn read_only() -> Vec<zk::Acl> {
    vec![zk::Acl::new(zk::Permission::READ, zk::AuthId::anyone())]
}

/// Which lock an entry of the book is of.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Key {
    FairA,
    FairB,
    Rw,
    Sem,
    Simple,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    Excl,
    Read,
    Write,
    Lease,
}

enum Held {
    Lock(Key, LockGuard),
    Read(ReadGuard),
    Write(WriteGuard),
    Multi(MultiGuard),
}

impl Held {
    /// (lock, role, node path) of each node the guard holds.
    fn entries(&self) -> Vec<(Key, Role, String)> {
        match self {
            Held::Lock(Key::Sem, g) => vec![(Key::Sem, Role::Lease, g.path().to_string())],
            Held::Lock(k, g) => vec![(*k, Role::Excl, g.path().to_string())],
            Held::Read(g) => vec![(Key::Rw, Role::Read, g.path().to_string())],
            Held::Write(g) => vec![(Key::Rw, Role::Write, g.path().to_string())],
            Held::Multi(m) => m
                .guards()
                .iter()
                .enumerate()
                .map(|(i, g)| {
                    let k = if i == 0 { Key::FairA } else { Key::FairB };
                    (k, Role::Excl, g.path().to_string())
                })
                .collect(),
        }
    }

    fn is_lost(&self) -> bool {
        match self {
            Held::Lock(_, g) => g.is_lost(),
            Held::Read(g) => g.is_lost(),
            Held::Write(g) => g.is_lost(),
            Held::Multi(m) => m.is_lost(),
        }
    }

    async fn release(self) -> Result<(), Error> {
        match self {
            Held::Lock(_, g) => g.release().await,
            Held::Read(g) => g.release().await,
            Held::Write(g) => g.release().await,
            Held::Multi(m) => m.release().await,
        }
    }
}

struct Entry {
    id: u64,
    key: Key,
    role: Role,
    path: String,
    started: Instant,
}

#[derive(Default)]
struct Book {
    next: u64,
    holding: Vec<Entry>,
    /// Every node path the administrator deleted (or was about to), and when.
    admin_deleted: Vec<(String, Instant)>,
    wrong: Vec<String>,
    answers: BTreeMap<String, usize>,
}

impl Book {
    /// Whether the administrator deleted `path` at or after `since`.
    fn deleted_since(&self, path: &str, since: Instant) -> bool {
        self.admin_deleted
            .iter()
            .any(|(p, at)| p == path && *at >= since)
    }

    fn granted(&mut self, who: &str, held: &Held, started: Instant) -> u64 {
        let id = self.next;
        self.next += 1;
        for (key, role, path) in held.entries() {
            let live: Vec<&Entry> = self
                .holding
                .iter()
                .filter(|e| e.key == key && !self.deleted_since(&e.path, e.started))
                .collect();
            let clash = match role {
                Role::Lease => live.len() >= 2,
                Role::Read => live.iter().any(|e| e.role == Role::Write),
                Role::Write | Role::Excl => !live.is_empty(),
            };
            if clash && !self.deleted_since(&path, started) {
                self.wrong.push(format!(
                    "{who} granted {key:?} {role:?} ({path}) beside {:?}",
                    live.iter()
                        .map(|e| (e.role, e.path.clone()))
                        .collect::<Vec<_>>()
                ));
            }
            self.holding.push(Entry {
                id,
                key,
                role,
                path,
                started,
            });
        }
        id
    }

    fn letting_go(&mut self, who: &str, id: u64, held: &Held) {
        let mine: Vec<usize> = (0..self.holding.len())
            .filter(|&i| self.holding[i].id == id)
            .collect();
        if held.is_lost()
            && !mine
                .iter()
                .any(|&i| self.deleted_since(&self.holding[i].path, self.holding[i].started))
        {
            self.wrong.push(format!(
                "{who}: a guard {:?} was told of a loss though the administrator deleted none of its nodes",
                held.entries()
            ));
        }
        self.holding.retain(|e| e.id != id);
    }

    fn answered<T>(&mut self, what: &str, r: &Result<T, Error>) {
        let key = match r {
            Ok(_) => format!("{what}: Ok"),
            Err(e) => format!(
                "{what}: {}",
                format!("{e:?}").split([' ', '(', '{']).next().unwrap()
            ),
        };
        *self.answers.entry(key).or_default() += 1;
    }
}

struct Locks {
    fa: FairLock,
    fb: FairLock,
    multi: MultiLock,
    rw: RwLock,
    sem: Semaphore,
    simple: ExclusiveLock,
}

impl Locks {
    fn new(s: &Session, root: &str) -> Locks {
        Locks {
            fa: FairLock::new(s, format!("{root}/fa")).unwrap(),
            fb: FairLock::new(s, format!("{root}/fb")).unwrap(),
            multi: MultiLock::new(s, [format!("{root}/fa"), format!("{root}/fb")]).unwrap(),
            rw: RwLock::new(s, format!("{root}/rw")).unwrap(),
            sem: Semaphore::new(s, format!("{root}/sem"), 2).unwrap(),
            simple: ExclusiveLock::new(s, format!("{root}/simple/lock")).unwrap(),
        }
    }

    /// One acquire as the schedule picks it: `how` 0 timed, 1 tried, 2 unbounded but given up
    /// after `bound` (the future dropped: `None`), 3 unbounded.
    async fn acquire(
        &self,
        which: usize,
        how: usize,
        bound: Duration,
    ) -> (String, Option<Result<Held, Error>>) {
        macro_rules! go {
            ($name:expr, $timed:expr, $try:expr, $plain:expr, $wrap:expr) => {{
                let (what, got) = match how {
                    0 => ("timed", Some($timed.await.map($wrap))),
                    1 => ("try", Some($try.await.map($wrap))),
                    2 => (
                        "dropped",
                        tokio::time::timeout(bound, $plain)
                            .await
                            .ok()
                            .map(|r| r.map($wrap)),
                    ),
                    _ => ("waiter", Some($plain.await.map($wrap))),
                };
                (format!("{} {}", $name, what), got)
            }};
        }
        match which {
            0 => go!(
                "fa",
                self.fa.lock_timeout(bound),
                self.fa.try_lock(),
                self.fa.lock(),
                |g| Held::Lock(Key::FairA, g)
            ),
            1 => go!(
                "fb",
                self.fb.lock_timeout(bound),
                self.fb.try_lock(),
                self.fb.lock(),
                |g| Held::Lock(Key::FairB, g)
            ),
            2 => go!(
                "multi",
                self.multi.lock_timeout(bound),
                self.multi.try_lock(),
                self.multi.lock(),
                Held::Multi
            ),
            3 => go!(
                "read",
                self.rw.read_timeout(bound),
                self.rw.try_read(),
                self.rw.read(),
                Held::Read
            ),
            4 => go!(
                "write",
                self.rw.write_timeout(bound),
                self.rw.try_write(),
                self.rw.write(),
                Held::Write
            ),
            5 => go!(
                "sem",
                self.sem.acquire_timeout(bound),
                self.sem.try_acquire(),
                self.sem.acquire(),
                |g| Held::Lock(Key::Sem, g)
            ),
            _ => go!(
                "simple",
                self.simple.lock_timeout(bound),
                self.simple.try_lock(),
                self.simple.lock(),
                |g| Held::Lock(Key::Simple, g)
            ),
        }
    }
}

const DIRS: [&str; 5] = ["fa", "fb", "rw", "sem", "simple"];

/// The nodes the administrator and a foreign client keep in the directories: never ours.
const KEPT: [(&str, &str); 3] = [
    ("fa", "foreign-keep"),
    ("sem", "admin-keep"),
    ("simple", "foreign-keep"),
];

async fn sweeper_seed(seed: u64, steps: u32) {
    println!("review30 seed {seed} (replay: ZKR_REVIEW30_SEED={seed})");
    let admin = admin().await;
    let root = unique_root(&format!("review30-{seed}"));
    an_open_directory(&admin, &root).await;
    for d in DIRS {
        admin
            .create(
                &format!("{root}/{d}"),
                b"",
                &zk::CreateMode::Persistent.with_acls(zk::Acls::new(&perms(false))),
            )
            .await
            .unwrap();
    }
    let foreign = zk::Client::connector()
        .with_auth("digest", b"review30-foreign:secret")
        .connect(&shared_server().connect_string())
        .await
        .unwrap();
    let foreign_acl = [
        zk::Acl::new(zk::Permission::ALL, zk::AuthId::authed()),
        zk::Acl::new(zk::Permission::READ, zk::AuthId::anyone()),
    ];
    let mut kept = Vec::new();
    for (d, name) in KEPT {
        let path = format!("{root}/{d}/{name}");
        if name.starts_with("foreign") {
            foreign
                .create(
                    &path,
                    b"",
                    &zk::CreateMode::Ephemeral.with_acls(zk::Acls::new(&foreign_acl)),
                )
                .await
                .unwrap();
        } else {
            admin
                .create(
                    &path,
                    b"",
                    &zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all()),
                )
                .await
                .unwrap();
        }
        kept.push(path);
    }

    let book = Arc::new(Mutex::new(Book::default()));
    let mut plan = support::rng::Rng::new(seed ^ 0xd00d);
    // One session may have its every handle dropped, without close(), after some step.
    let doomed = plan.chance(50).then(|| plan.below(3) as usize);
    let doom_at = plan.range(1, steps as u64) as u32;
    println!("seed {seed}: session dropped without close: {doomed:?} after step {doom_at}");
    let ready = Arc::new(AtomicUsize::new(0));
    let fixed = Arc::new(tokio::sync::Notify::new());
    let fixed_flag = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut sessions: Vec<Option<Session>> = Vec::new();
    let mut proxies: Vec<FaultProxy> = Vec::new();
    let mut actors = Vec::new();
    for i in 0..3usize {
        let (s, proxy) = session_via_proxy(Duration::from_secs(8), LossPolicy::OnExpiry).await;
        proxies.push(proxy);
        for j in 0..2u64 {
            let s = s.clone();
            let root = root.clone();
            let book = book.clone();
            let ready = ready.clone();
            let (fixed, fixed_flag) = (fixed.clone(), fixed_flag.clone());
            let mut rng =
                support::rng::Rng::new(seed.wrapping_mul(131).wrapping_add(i as u64 * 2 + j));
            let doomed_here = doomed == Some(i);
            let who = format!("s{i}a{j}");
            actors.push(tokio::spawn(async move {
                let locks = Locks::new(&s, &root);
                let mut step = 0;
                while step < steps && !(doomed_here && step >= doom_at) {
                    step += 1;
                    let which = rng.weighted(&[2, 2, 2, 2, 2, 2, 2]);
                    let how = rng.weighted(&[4, 2, 1]);
                    let bound = rng.ms(20, 400);
                    let started = Instant::now();
                    let (what, got) = locks.acquire(which, how, bound).await;
                    let Some(got) = got else { continue };
                    book.lock().unwrap().answered(&what, &got);
                    let Ok(held) = got else {
                        tokio::time::sleep(rng.ms(0, 50)).await;
                        continue;
                    };
                    let id = book.lock().unwrap().granted(&who, &held, started);
                    tokio::time::sleep(rng.ms(0, 40)).await;
                    book.lock().unwrap().letting_go(&who, id, &held);
                    if rng.chance(40) {
                        drop(held);
                    } else {
                        let released = held.release().await;
                        book.lock().unwrap().answered("release", &released);
                    }
                }
                if doomed_here {
                    // Every handle of this session goes, without close().
                    drop(locks);
                    drop(s);
                    ready.fetch_add(1, Ordering::SeqCst);
                    return;
                }
                // The end: maybe a waiter, started while the ACLs are still broken.
                if !rng.chance(60) {
                    ready.fetch_add(1, Ordering::SeqCst);
                    return;
                }
                let mut which;
                let mut started;
                let mut signalled = false;
                let mut tries = 0;
                let (what, got) = loop {
                    started = Instant::now();
                    which = rng.below(7) as usize;
                    tries += 1;
                    let fut = locks.acquire(which, 3, Duration::ZERO);
                    tokio::pin!(fut);
                    let (what, got) = tokio::select! {
                        r = &mut fut => r,
                        _ = tokio::time::sleep(Duration::from_millis(300)) => {
                            ready.fetch_add(1, Ordering::SeqCst);
                            signalled = true;
                            fut.await
                        }
                    };
                    // Answered before it waited (NoAuth behind our stuck node, or granted):
                    // tried again, so that a waiter is waiting when the ACLs are fixed.
                    if signalled || tries >= 30 {
                        break (what, got);
                    }
                    let got = got.unwrap();
                    book.lock()
                        .unwrap()
                        .answered(&format!("{what} (before waiting)"), &got);
                    if let Ok(held) = got {
                        let id = book.lock().unwrap().granted(&who, &held, started);
                        tokio::time::sleep(rng.ms(0, 40)).await;
                        book.lock().unwrap().letting_go(&who, id, &held);
                        let released = held.release().await;
                        book.lock().unwrap().answered("release", &released);
                    } else {
                        tokio::time::sleep(rng.ms(50, 150)).await;
                    }
                };
                let after_fix = fixed_flag.load(Ordering::SeqCst);
                let _ = &fixed;
                let what = if after_fix {
                    format!("{what} after the fix")
                } else {
                    what
                };
                let got = got.unwrap();
                book.lock().unwrap().answered(&what, &got);
                if let Ok(held) = got {
                    let id = book.lock().unwrap().granted(&who, &held, started);
                    book.lock().unwrap().letting_go(&who, id, &held);
                    let released = held.release().await;
                    book.lock().unwrap().answered(
                        if after_fix {
                            "final release after the fix"
                        } else {
                            "final release"
                        },
                        &released,
                    );
                } else if after_fix {
                    book.lock().unwrap().wrong.push(format!(
                        "{who}: a waiter was answered {got:?} after the fix",
                        got = got.err()
                    ));
                }
                if !signalled {
                    ready.fetch_add(1, Ordering::SeqCst);
                }
            }));
        }
        sessions.push(if doomed == Some(i) { None } else { Some(s) });
    }

    // The administrator.
    // Original ACLs of the nodes it made read-only: path -> (czxid, ACL).
    let originals: Arc<Mutex<OriginalAcls>> = Arc::default();
    let chaos = tokio::spawn({
        let (admin, root, book, originals) =
            (admin.clone(), root.clone(), book.clone(), originals.clone());
        let kept = kept.clone();
        let mut rng = support::rng::Rng::new(seed ^ 0x5eed_0030);
        async move {
            let mut delete_allowed = [false; 5];
            let mut ops: BTreeMap<&'static str, usize> = BTreeMap::new();
            loop {
                tokio::time::sleep(rng.ms(20, 150)).await;
                let d = rng.below(5) as usize;
                let dir = format!("{root}/{}", DIRS[d]);
                let op = rng.weighted(&[3, 2, 3, 3, 2]);
                let name = match op {
                    0 => {
                        delete_allowed[d] = !delete_allowed[d];
                        admin
                            .set_acl(&dir, &perms(delete_allowed[d]), None)
                            .await
                            .unwrap();
                        "flip"
                    }
                    1 => {
                        let (acl, _) = admin.get_acl(&dir).await.unwrap();
                        admin.set_acl(&dir, &acl, None).await.unwrap();
                        "same acl"
                    }
                    _ => {
                        let mut names: Vec<String> = children(&admin, &dir)
                            .await
                            .into_iter()
                            .map(|c| format!("{dir}/{c}"))
                            .filter(|p| !kept.contains(p))
                            .collect();
                        names.sort();
                        if names.is_empty() {
                            continue;
                        }
                        let node = names[rng.below(names.len() as u64) as usize].clone();
                        match op {
                            2 => {
                                book.lock()
                                    .unwrap()
                                    .admin_deleted
                                    .push((node.clone(), Instant::now()));
                                let _ = admin.delete(&node, None).await;
                                "delete node"
                            }
                            3 => {
                                let Ok((acl, stat)) = admin.get_acl(&node).await else {
                                    continue;
                                };
                                if acl == read_only() {
                                    continue;
                                }
                                originals
                                    .lock()
                                    .unwrap()
                                    .entry((node.clone(), stat.czxid))
                                    .or_insert(acl);
                                let _ = admin
                                    .set_acl(&node, &read_only(), Some(stat.aversion))
                                    .await;
                                "read-only"
                            }
                            _ => {
                                let Ok((_, stat)) = admin.get_acl(&node).await else {
                                    continue;
                                };
                                let Some(acl) = originals
                                    .lock()
                                    .unwrap()
                                    .remove(&(node.clone(), stat.czxid))
                                else {
                                    continue;
                                };
                                let _ = admin.set_acl(&node, &acl, None).await;
                                "acl back"
                            }
                        }
                    }
                };
                *ops.entry(name).or_default() += 1;
                if ops.values().sum::<usize>() % 25 == 0 {
                    println!("seed {seed}: admin ops so far {ops:?}");
                }
            }
        }
    });

    // Every actor done with its schedule (the waiters among them waiting).
    let by = Instant::now() + Duration::from_secs(60);
    while ready.load(Ordering::SeqCst) < actors.len() {
        assert!(
            Instant::now() < by,
            "seed {seed}: the actors' schedules within 60 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    chaos.abort();
    let _ = chaos.await;
    // The fix: DELETE everywhere, every node ACL back.
    for d in DIRS {
        admin
            .set_acl(&format!("{root}/{d}"), &perms(true), None)
            .await
            .unwrap();
    }
    let restore: Vec<_> = originals.lock().unwrap().drain().collect();
    for ((node, czxid), acl) in restore {
        if let Ok((_, stat)) = admin.get_acl(&node).await {
            if stat.czxid == czxid {
                let _ = admin.set_acl(&node, &acl, None).await;
            }
        }
    }
    fixed_flag.store(true, Ordering::SeqCst);
    fixed.notify_waiters();
    let fixed_at = Instant::now();
    let mut hung = Vec::new();
    for (n, a) in actors.into_iter().enumerate() {
        let left = Duration::from_secs(15).saturating_sub(fixed_at.elapsed());
        match tokio::time::timeout(left, a).await {
            Ok(r) => r.unwrap(),
            Err(_) => hung.push(format!("s{}a{}", n / 2, n % 2)),
        }
    }
    let waiters_took = fixed_at.elapsed();
    let dir_nodes = |admin: zk::Client, root: String| async move {
        let mut all = Vec::new();
        for d in DIRS {
            let dir = format!("{root}/{d}");
            for c in children(&admin, &dir).await {
                let path = format!("{dir}/{c}");
                if let Ok(Some(stat)) = admin.check_stat(&path).await {
                    all.push((path, stat.ephemeral_owner));
                }
            }
        }
        all
    };
    let live: Vec<i64> = sessions
        .iter()
        .flatten()
        .filter_map(|s| s.session_id())
        .collect();
    let ours_live = |nodes: &[(String, i64)]| -> Vec<String> {
        nodes
            .iter()
            .filter(|(_, owner)| live.contains(owner))
            .map(|(p, _)| p.clone())
            .collect()
    };
    let by = Instant::now() + Duration::from_secs(5);
    let mut left = ours_live(&dir_nodes(admin.clone(), root.clone()).await);
    while !left.is_empty() && Instant::now() < by {
        tokio::time::sleep(Duration::from_millis(50)).await;
        left = ours_live(&dir_nodes(admin.clone(), root.clone()).await);
    }
    // Quiet: the sweepers must have stopped.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let live_proxies: Vec<&FaultProxy> = proxies
        .iter()
        .enumerate()
        .filter(|(i, _)| doomed != Some(*i))
        .map(|(_, p)| p)
        .collect();
    let before: Vec<u64> = live_proxies
        .iter()
        .map(|p| p.requests_forwarded())
        .collect();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let quiet: Vec<u64> = live_proxies
        .iter()
        .zip(&before)
        .map(|(p, b)| p.requests_forwarded() - b)
        .collect();
    let survivors = dir_nodes(admin.clone(), root.clone()).await;
    for s in sessions.iter().flatten() {
        s.close().await;
    }
    // A dropped session closes in the background (or expires): give it its timeout.
    let by = Instant::now() + Duration::from_secs(12);
    let mut closed = dir_nodes(admin.clone(), root.clone()).await;
    while closed.iter().any(|(p, _)| !kept.contains(p)) && Instant::now() < by {
        tokio::time::sleep(Duration::from_millis(100)).await;
        closed = dir_nodes(admin.clone(), root.clone()).await;
    }
    let book = book.lock().unwrap();
    println!(
        "seed {seed}: answers {:?}; admin deleted {} nodes; waiters done {waiters_took:?} after the fix; \
         live nodes left {left:?}; requests in 3 s quiet per live session {quiet:?}",
        book.answers,
        book.admin_deleted.len()
    );
    let mut wrong = book.wrong.clone();
    if !hung.is_empty() {
        wrong.push(format!(
            "waiters not granted within 15 s of the fix: {hung:?}"
        ));
    }
    if !left.is_empty() {
        wrong.push(format!(
            "nodes of live sessions left 5 s after the waiters, no guard holding them: {left:?}"
        ));
    }
    if quiet.iter().any(|&q| q > 3) {
        wrong.push(format!(
            "requests sent in 3 s of quiet per live session: {quiet:?} (the sweeper still runs)"
        ));
    }
    for k in &kept {
        if !survivors.iter().any(|(p, _)| p == k) || !closed.iter().any(|(p, _)| p == k) {
            wrong.push(format!("a node not ours was deleted: {k}"));
        }
    }
    let extra: Vec<_> = closed.iter().filter(|(p, _)| !kept.contains(p)).collect();
    if !extra.is_empty() {
        wrong.push(format!("nodes left after every session closed: {extra:?}"));
    }
    assert!(
        wrong.is_empty(),
        "seed {seed} (replay: ZKR_REVIEW30_SEED={seed}): {wrong:#?}"
    );
}

fn seeds() -> Vec<u64> {
    if let Some(seed) = std::env::var("ZKR_REVIEW30_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
    {
        return vec![seed];
    }
    let Some(n) = std::env::var("ZKR_REVIEW30_SEEDS")
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
    else {
        // Seeds 1 and 2 (1 to 65 held on 8e803b5; with the sweeper not started, seed 1's
        // waiters are never granted), and one new one each run, printed for replay.
        return vec![
            1,
            2,
            support::rng::seed_from_env("ZKR_REVIEW30_SEED") % 1_000_000,
        ];
    };
    let first: u64 = std::env::var("ZKR_REVIEW30_FIRST")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1);
    (first..first + n).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn review30_seeded_sweeper_schedule() {
    for seed in seeds() {
        sweeper_seed(seed, 16).await;
    }
}
