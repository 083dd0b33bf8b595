//! What every section shares: samples, the figures of one round, `mntr`, connections, the
//! workers' loop and the exclusion check.

use std::collections::BTreeMap;
use std::future::Future;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use zk_recipes::{zk, Session};

use crate::Cfg;

pub type BoxError = Box<dyn std::error::Error + Send + Sync>;
pub type Res<T> = std::result::Result<T, BoxError>;

/// As PeerBench.java asks.
pub const SESSION_TIMEOUT: Duration = Duration::from_secs(30);
pub static PERSISTENT: zk::CreateOptions<'static> =
    zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
pub static EPHEMERAL_SEQUENTIAL: zk::CreateOptions<'static> =
    zk::CreateMode::EphemeralSequential.with_acls(zk::Acls::anyone_all());

/// Nanosecond samples; percentiles by nearest rank, in microseconds (as PeerBench).
#[derive(Debug, Default, Clone)]
pub struct Samples(pub Vec<u64>);

impl Samples {
    pub fn add(&mut self, d: Duration) {
        self.0.push(d.as_nanos() as u64);
    }
    pub fn len(&self) -> usize {
        self.0.len()
    }
    pub fn pct(&self, p: f64) -> f64 {
        if self.0.is_empty() {
            return f64::NAN;
        }
        let mut v = self.0.clone();
        v.sort_unstable();
        let idx = ((p / 100.0 * v.len() as f64).ceil() as usize).saturating_sub(1);
        v[idx.min(v.len() - 1)] as f64 / 1000.0
    }
}

/// The figures of one round of our sections, by name (without the `ours.` prefix); `quiet`:
/// not printed (a warm-up's).
#[derive(Debug, Default)]
pub struct Metrics(pub BTreeMap<String, f64>, pub bool);

impl Metrics {
    /// Figures nobody reads: those of a warm-up.
    pub fn quiet() -> Metrics {
        Metrics(BTreeMap::new(), true)
    }

    pub fn put(&mut self, name: &str, v: f64, unit: &str) {
        if !self.1 {
            // A ratio near a goal's bound (1.15) needs more than one decimal.
            let shown = if unit == "x" {
                format!("{v:.3}")
            } else {
                fmt_num(v)
            };
            println!("METRIC ours.{name} {shown} {unit}");
        }
        self.0.insert(name.to_string(), v);
    }
}

pub fn fmt_num(v: f64) -> String {
    if !v.is_finite() {
        "nan".into()
    } else if (v - v.round()).abs() < 1e-9 && v.abs() < 1e15 {
        format!("{}", v.round() as i64)
    } else {
        format!("{v:.1}")
    }
}

pub fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}

pub fn section(title: &str) {
    println!();
    println!("== {title}   (load average {})", loadavg());
}

/// A four-letter word to the first host of `connect`. (`ZooKeeperServer::four_letter` needs
/// the harness's server; the free `four_letter_at` and `parse_mntr` under it are private,
/// and `ZK_CONNECT` names a server the harness did not start.)
pub fn four(connect: &str, cmd: &str) -> Option<String> {
    let host = connect.split(',').next()?.split('/').next()?;
    let mut s = TcpStream::connect(host).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    s.write_all(cmd.as_bytes()).ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    Some(out)
}

pub fn mntr(connect: &str) -> BTreeMap<String, f64> {
    four(connect, "mntr")
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split_once('\t'))
        .filter_map(|(k, v)| Some((k.trim().to_string(), v.trim().parse::<f64>().ok()?)))
        .collect()
}

pub fn mntr_get(m: &BTreeMap<String, f64>, k: &str) -> f64 {
    m.get(k).copied().unwrap_or(f64::NAN)
}

/// The `mntr` counters of watch notifications fired, by event type.
pub const FIRED_KEYS: [&str; 4] = [
    "zk_sum_node_deleted_watch_count",
    "zk_sum_node_children_watch_count",
    "zk_sum_node_changed_watch_count",
    "zk_sum_node_created_watch_count",
];

/// Watch notifications the server has fired (PeerBench's `firedWatches`).
pub fn fired_watches(connect: &str) -> f64 {
    let m = mntr(connect);
    FIRED_KEYS
        .iter()
        .map(|k| m.get(*k).copied().unwrap_or(0.0))
        .sum()
}

/// Sets TCP_NODELAY on this process's sockets to the port of `cs`, as the session manager
/// does for its own (zookeeper-client 0.11 never sets it), so that the raw baselines run with
/// Nagle off too. This is the one piece the bench cannot reuse: the crate's
/// `net::set_nodelay_towards` is `pub(crate)`. Exposing it (for instance as
/// `testing::set_nodelay_towards`) would let this copy go.
pub fn nodelay(cs: &str) {
    let Some(port) = cs
        .split(',')
        .next()
        .and_then(|h| h.split('/').next())
        .and_then(|h| h.rsplit_once(':'))
        .and_then(|(_, p)| p.parse::<u16>().ok())
    else {
        return;
    };
    let Ok(dir) = std::fs::read_dir("/proc/self/fd") else {
        return;
    };
    for fd in dir
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
    {
        // SAFETY: getpeername and setsockopt only read and write the local buffers given, and
        // fail harmlessly (ENOTSOCK, EBADF) on descriptors that are not sockets.
        unsafe {
            let mut addr: libc::sockaddr_in = std::mem::zeroed();
            let mut len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
            let peer = libc::getpeername(fd, &mut addr as *mut _ as *mut libc::sockaddr, &mut len);
            if peer == 0
                && i32::from(addr.sin_family) == libc::AF_INET
                && u16::from_be(addr.sin_port) == port
            {
                let one: libc::c_int = 1;
                libc::setsockopt(
                    fd,
                    libc::IPPROTO_TCP,
                    libc::TCP_NODELAY,
                    &one as *const libc::c_int as *const libc::c_void,
                    std::mem::size_of::<libc::c_int>() as libc::socklen_t,
                );
            }
        }
    }
}

pub async fn connect(cs: &str) -> Res<Session> {
    Ok(Session::builder(cs)
        .with_session_timeout(SESSION_TIMEOUT)
        .with_connect_timeout(Duration::from_secs(20))
        .connect()
        .await?)
}

pub async fn connect_many(cs: &str, n: usize) -> Res<Vec<Session>> {
    let mut out = Vec::with_capacity(n);
    while out.len() < n {
        let k = (n - out.len()).min(16);
        for s in futures::future::join_all((0..k).map(|_| connect(cs))).await {
            out.push(s?);
        }
    }
    Ok(out)
}

pub async fn close_all(sessions: &[Session]) {
    futures::future::join_all(sessions.iter().map(|s| s.close())).await;
}

pub fn requests(sessions: &[Session]) -> u64 {
    sessions.iter().map(|s| s.request_count()).sum()
}

/// A bare `zookeeper_client::Client` (our client library, no recipe), Nagle off.
pub async fn raw_client(cs: &str) -> Res<zk::Client> {
    let client = raw_connect(cs, None).await?;
    nodelay(cs);
    Ok(client)
}

/// A bare client, authenticated with `digest` as `auth` (`user:password`) when given.
async fn raw_connect(cs: &str, auth: Option<&[u8]>) -> Res<zk::Client> {
    let mut connector = zk::Client::connector().with_session_timeout(SESSION_TIMEOUT);
    if let Some(auth) = auth {
        connector = connector.with_auth("digest", auth);
    }
    Ok(connector.connect(cs).await?)
}

pub async fn raw_clients(cs: &str, n: usize) -> Res<Vec<zk::Client>> {
    raw_clients_auth(cs, n, None).await
}

/// `n` bare clients, made 16 at a time; authenticated as [`raw_connect`] says.
pub async fn raw_clients_auth(cs: &str, n: usize, auth: Option<&[u8]>) -> Res<Vec<zk::Client>> {
    let mut out = Vec::with_capacity(n);
    while out.len() < n {
        let k = (n - out.len()).min(16);
        for c in futures::future::join_all((0..k).map(|_| raw_connect(cs, auth))).await {
            out.push(c?);
        }
    }
    nodelay(cs);
    Ok(out)
}

pub async fn count_children(client: &zk::Client, path: &str) -> usize {
    client.get_children(path).await.map_or(0, |(c, _)| c.len())
}

/// Polls `f` every 20 ms until it returns true, for at most `limit`.
pub async fn wait_until(limit: Duration, what: &str, mut f: impl FnMut() -> bool) -> Res<()> {
    let deadline = Instant::now() + limit;
    while !f() {
        if Instant::now() >= deadline {
            return Err(format!("timed out after {limit:?} waiting for {what}").into());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}

/// Exclusion check shared by the workers of one run (as PeerBench: a holder counter), plus
/// fencing tokens that must grow.
#[derive(Default)]
pub struct Exclusion {
    readers: AtomicUsize,
    writers: AtomicUsize,
    pub violations: AtomicU64,
    last_token: AtomicI64,
}

impl Exclusion {
    pub fn enter_exclusive(&self, token: i64) {
        if self.writers.fetch_add(1, Ordering::SeqCst) != 0
            || self.readers.load(Ordering::SeqCst) != 0
        {
            self.violations.fetch_add(1, Ordering::SeqCst);
        }
        if self.last_token.fetch_max(token, Ordering::SeqCst) >= token {
            self.violations.fetch_add(1, Ordering::SeqCst);
        }
    }
    pub fn leave_exclusive(&self) {
        if self.writers.load(Ordering::SeqCst) != 1 || self.readers.load(Ordering::SeqCst) != 0 {
            self.violations.fetch_add(1, Ordering::SeqCst);
        }
        self.writers.fetch_sub(1, Ordering::SeqCst);
    }
    pub fn enter_shared(&self) {
        self.readers.fetch_add(1, Ordering::SeqCst);
        if self.writers.load(Ordering::SeqCst) != 0 {
            self.violations.fetch_add(1, Ordering::SeqCst);
        }
    }
    pub fn leave_shared(&self) {
        if self.writers.load(Ordering::SeqCst) != 0 {
            self.violations.fetch_add(1, Ordering::SeqCst);
        }
        self.readers.fetch_sub(1, Ordering::SeqCst);
    }
    pub fn violations(&self) -> f64 {
        self.violations.load(Ordering::SeqCst) as f64
    }
}

/// Per-task record: completion instant and wait of every acquisition.
pub type Recs = Vec<(Instant, Duration)>;

pub fn in_window(recs: &[Recs], ws: Instant, we: Instant) -> Samples {
    let mut s = Samples::default();
    for (done, wait) in recs.iter().flatten() {
        if *done >= ws && *done < we {
            s.add(*wait);
        }
    }
    s
}

/// The measurement window of a run of workers, with request and packet counts inside it.
pub struct Window {
    pub ws: Instant,
    pub we: Instant,
    pub requests: u64,
    pub packets: f64,
    /// Log syncs of the server in the window (mntr `zk_cnt_fsynctime`).
    pub fsyncs: f64,
    /// CPU time of this process in the window [µs].
    pub client_cpu: f64,
    /// CPU time of the server's JVM in the window [µs], when the bench started it (else NaN).
    pub server_cpu: f64,
}

/// The process id of the server this round's sections run on, when the bench started it.
pub static SERVER_PID: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

/// CPU time (user + system) the bench's own server has used so far [µs]; NaN when the bench
/// did not start it or `/proc` cannot tell.
pub fn server_cpu_us() -> f64 {
    let pid = SERVER_PID.load(Ordering::SeqCst);
    if pid == 0 {
        return f64::NAN;
    }
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return f64::NAN;
    };
    // Fields after the command name (which may hold spaces) start at its closing parenthesis:
    // utime and stime are the 14th and 15th fields of the line, in clock ticks.
    let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) else {
        return f64::NAN;
    };
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok());
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    match (ticks(11), ticks(12)) {
        (Some(u), Some(s)) if hz > 0.0 => (u + s) / hz * 1e6,
        _ => f64::NAN,
    }
}

/// Starts one worker per session, waits `warm`, measures `cdur`, stops them and collects
/// their records (PeerBench's `runWorkers`).
pub async fn run_workers<F, Fut>(
    cs: &str,
    sessions: &[Session],
    cfg: &Cfg,
    worker: F,
) -> Res<(Window, Vec<Recs>)>
where
    F: Fn(usize, Session, Arc<AtomicBool>) -> Fut,
    Fut: Future<Output = Res<Recs>> + Send + 'static,
{
    let stop = Arc::new(AtomicBool::new(false));
    let barrier = Arc::new(tokio::sync::Barrier::new(sessions.len() + 1));
    let mut tasks = Vec::new();
    for (i, s) in sessions.iter().enumerate() {
        let fut = worker(i, s.clone(), stop.clone());
        let barrier = barrier.clone();
        tasks.push(tokio::spawn(async move {
            barrier.wait().await;
            fut.await
        }));
    }
    barrier.wait().await;
    let ws = Instant::now() + Duration::from_secs_f64(cfg.warm);
    let we = ws + Duration::from_secs_f64(cfg.cdur);
    tokio::time::sleep_until(ws.into()).await;
    // mntr is blocking I/O: keep it off the workers' threads.
    let (r0, m0) = (requests(sessions), tokio::task::block_in_place(|| mntr(cs)));
    let (c0, s0) = (cpu_us(), server_cpu_us());
    tokio::time::sleep_until(we.into()).await;
    let (c1, s1) = (cpu_us(), server_cpu_us());
    let (r1, m1) = (requests(sessions), tokio::task::block_in_place(|| mntr(cs)));
    stop.store(true, Ordering::SeqCst);
    let mut recs = Vec::new();
    for t in tasks {
        recs.push(
            tokio::time::timeout(Duration::from_secs(60), t)
                .await
                .map_err(|_| "a worker did not stop within 60 s")???,
        );
    }
    let d = |k: &str| mntr_get(&m1, k) - mntr_get(&m0, k);
    Ok((
        Window {
            ws,
            we,
            requests: r1 - r0,
            packets: d("zk_packets_received"),
            fsyncs: d("zk_cnt_fsynctime"),
            client_cpu: c1 - c0,
            server_cpu: s1 - s0,
        },
        recs,
    ))
}

/// CPU time (user + system) this process has used so far, in microseconds.
pub fn cpu_us() -> f64 {
    // SAFETY: getrusage writes into the zeroed struct it is given.
    unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut ru);
        let tv = |t: libc::timeval| t.tv_sec as f64 * 1e6 + t.tv_usec as f64;
        tv(ru.ru_utime) + tv(ru.ru_stime)
    }
}

/// This process's context switches so far (voluntary and not, every thread): each is a
/// thread that slept and was woken, or was preempted.
pub fn ctx_switches() -> f64 {
    // SAFETY: getrusage writes into the zeroed struct it is given.
    unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut ru);
        (ru.ru_nvcsw + ru.ru_nivcsw) as f64
    }
}

/// This process's resident set size now, in bytes (`VmRSS` of `/proc/self/status`; 0 where
/// there is none).
pub fn rss_bytes() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        })
        .map_or(0.0, |kb| kb * 1024.0)
}

/// Turns `perf record` on or off when the bench runs under
/// `perf record --control fifo:<path> -D -1` with `BENCH_PERF_CTL=<path>` (a diagnostic: the
/// profile then covers only the measured phases, not the queue fill). `what` is printed so
/// two profiles (ours, the raw chain) can be told apart; with `BENCH_PERF_PHASE=<word>` only
/// the phases whose `what` contains the word are recorded.
pub fn perf_ctl(on: bool, what: &str) {
    let phase = std::env::var("BENCH_PERF_PHASE").unwrap_or_default();
    if !what.contains(phase.as_str()) {
        return;
    }
    if let Some(ctl) = std::env::var_os("BENCH_PERF_CTL") {
        let cmd = if on { "enable\n" } else { "disable\n" };
        if let Err(err) = std::fs::write(&ctl, cmd) {
            eprintln!("BENCH_PERF_CTL: cannot write {cmd:?} to {ctl:?}: {err}");
        }
        eprintln!("perf {} for {what}", cmd.trim());
    }
}
