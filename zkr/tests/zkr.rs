//! Tests of the `zkr` command, driving the built binary against a real ZooKeeper
//! (`zk_recipes::testing::shared_server()`).
//!
//! Every CMD is a small `sh -c` script that appends lines to a log file; the tests read the
//! log (and the znodes, through a client of their own) to check what happened. Every wait is
//! bounded, every spawned `zkr` is terminated on drop (SIGTERM, which it passes on to its CMD,
//! then SIGKILL), and the scripts' loops end by themselves after 30 s so nothing outlives a
//! failed test for long. Tests that cut a connection use a `FaultProxy` of their own.

#[path = "../../tests/support/mod.rs"]
mod support;

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use serde_json::Value;
use zk_recipes::testing::{shared_server, unique_root, FaultProxy};
use zookeeper_client as zk;

use support::history::InteropLine;
use support::interop::Peer;

const ZKR: &str = env!("CARGO_BIN_EXE_zkr");

/// A CMD loop that runs until killed, or 30 s at most.
const LOOP: &str = "i=0; while [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done";

// ------------------------------------------------------------------------------------------
// Helpers
// ------------------------------------------------------------------------------------------

fn direct() -> String {
    shared_server().connect_string()
}

/// `zkr --connect CONNECT --session-timeout 2s ARGS...`, with ZK_CONNECT removed.
fn zkr(connect: &str, args: &[&str]) -> Command {
    let mut c = Command::new(ZKR);
    c.env_remove("ZK_CONNECT")
        .args(["--connect", connect, "--session-timeout", "2s"])
        .args(args);
    c
}

/// `zkr ARGS...` with no ZooKeeper address at all.
fn zkr_bare(args: &[&str]) -> Command {
    let mut c = Command::new(ZKR);
    c.env_remove("ZK_CONNECT").args(args);
    c
}

/// A running `zkr` whose output is collected by background threads.
struct Proc {
    label: String,
    child: Child,
    stdout: Arc<Mutex<String>>,
    stderr: Arc<Mutex<String>>,
    status: Option<ExitStatus>,
}

fn collect(mut from: impl Read + Send + 'static) -> Arc<Mutex<String>> {
    let buf = Arc::new(Mutex::new(String::new()));
    let sink = buf.clone();
    std::thread::spawn(move || {
        let mut chunk = [0u8; 4096];
        while let Ok(n) = from.read(&mut chunk) {
            if n == 0 {
                break;
            }
            sink.lock()
                .unwrap()
                .push_str(&String::from_utf8_lossy(&chunk[..n]));
        }
    });
    buf
}

impl Proc {
    fn spawn(label: &str, mut cmd: Command) -> Proc {
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {label} ({ZKR}): {e}"));
        let stdout = collect(child.stdout.take().unwrap());
        let stderr = collect(child.stderr.take().unwrap());
        Proc {
            label: label.to_string(),
            child,
            stdout,
            stderr,
            status: None,
        }
    }

    fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    fn signal(&self, sig: Signal) {
        let _ = kill(Pid::from_raw(self.pid()), sig);
    }

    fn stdout(&self) -> String {
        self.stdout.lock().unwrap().clone()
    }

    fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    fn try_status(&mut self) -> Option<ExitStatus> {
        if self.status.is_none() {
            self.status = self.child.try_wait().expect("try_wait");
        }
        self.status
    }

    /// Waits for the exit status (its code, or -signal), panicking after `within`.
    fn wait(&mut self, within: Duration) -> i32 {
        let deadline = Instant::now() + within;
        loop {
            if let Some(status) = self.try_status() {
                // Let the reader threads drain the pipes.
                std::thread::sleep(Duration::from_millis(30));
                return code_of(status);
            }
            if Instant::now() >= deadline {
                panic!(
                    "expected {} to exit within {within:?}; still running\nstderr:\n{}",
                    self.label,
                    self.stderr()
                );
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if self.try_status().is_some() {
            return;
        }
        self.signal(Signal::SIGCONT);
        self.signal(Signal::SIGTERM);
        let deadline = Instant::now() + Duration::from_secs(3);
        while self.try_status().is_none() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        if self.try_status().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

fn code_of(status: ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    status
        .code()
        .unwrap_or_else(|| -status.signal().unwrap_or(0))
}

/// A finished `zkr`: status, output and how long it took.
struct Done {
    code: i32,
    stdout: String,
    stderr: String,
    took: Duration,
}

fn run(label: &str, cmd: Command, within: Duration) -> Done {
    let started = Instant::now();
    let mut p = Proc::spawn(label, cmd);
    let code = p.wait(within);
    Done {
        code,
        stdout: p.stdout(),
        stderr: p.stderr(),
        took: started.elapsed(),
    }
}

/// A log file in a fresh temporary directory (kept alive by the returned guard).
fn log_file() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = dir.path().join("log");
    std::fs::write(&log, "").unwrap();
    (dir, log)
}

fn read_lines(log: &Path) -> Vec<String> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

/// Waits until a line of `log` starts with `prefix`; returns it.
fn wait_for_line(log: &Path, prefix: &str, within: Duration) -> String {
    let deadline = Instant::now() + within;
    loop {
        if let Some(l) = read_lines(log).into_iter().find(|l| l.starts_with(prefix)) {
            return l;
        }
        if Instant::now() >= deadline {
            panic!(
                "expected a line starting with {prefix:?} in the log within {within:?}; log:\n{}",
                read_lines(log).join("\n")
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Runs `f` with a fresh client of the shared server, on a runtime of its own.
fn with_client<T>(
    f: impl for<'a> FnOnce(&'a zk::Client) -> futures::future::BoxFuture<'a, T>,
) -> T {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let client = tokio::time::timeout(Duration::from_secs(10), zk::Client::connect(&direct()))
            .await
            .expect("a test client connects within 10s")
            .expect("a test client connects");
        let out = tokio::time::timeout(Duration::from_secs(10), f(&client))
            .await
            .expect("the test client's request finished within 10s");
        drop(client);
        out
    })
}

/// The children of `path` (none if it does not exist).
fn children(path: &str) -> Vec<String> {
    let path = path.to_string();
    with_client(move |c| {
        Box::pin(async move {
            match c.list_children(&path).await {
                Ok(mut v) => {
                    v.sort();
                    v
                }
                Err(zk::Error::NoNode) => Vec::new(),
                Err(e) => panic!("list_children({path}): {e}"),
            }
        })
    })
}

fn wait_for_children(path: &str, n: usize, within: Duration) -> Vec<String> {
    let deadline = Instant::now() + within;
    loop {
        let c = children(path);
        if c.len() == n {
            return c;
        }
        if Instant::now() >= deadline {
            panic!("expected {n} children of {path} within {within:?}, saw {c:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Checks a log of `start <token>` / `end <token>` lines written by CMDs that must not
/// overlap: each start is followed by its own end, and tokens strictly increase.
fn assert_serial(lines: &[String], expected_runs: usize) -> Vec<i64> {
    assert_eq!(
        lines.len(),
        expected_runs * 2,
        "expected {expected_runs} start/end pairs, log:\n{}",
        lines.join("\n")
    );
    let mut tokens = Vec::new();
    for pair in lines.chunks(2) {
        let start = pair[0].strip_prefix("start ");
        let end = pair[1].strip_prefix("end ");
        assert!(
            start.is_some() && start == end,
            "CMDs overlapped (expected start X then end X): {pair:?}\nlog:\n{}",
            lines.join("\n")
        );
        tokens.push(
            start
                .unwrap()
                .trim()
                .split(' ')
                .next_back()
                .unwrap()
                .parse::<i64>()
                .unwrap_or_else(|e| panic!("bad token in {pair:?}: {e}")),
        );
    }
    for w in tokens.windows(2) {
        assert!(
            w[0] < w[1],
            "fencing tokens must increase from holder to holder: {tokens:?}"
        );
    }
    tokens
}

// ------------------------------------------------------------------------------------------
// Locks
// ------------------------------------------------------------------------------------------

#[test]
fn eight_concurrent_locks_never_overlap_and_tokens_increase() {
    // Given eight `zkr lock` processes started at once on one path
    let path = format!("{}/nightly", unique_root("zkr-eight"));
    let (_dir, log) = log_file();
    let script = r#"echo "start $ZK_FENCING_TOKEN" >> "$LOG"; sleep 0.1; echo "end $ZK_FENCING_TOKEN" >> "$LOG""#;
    let mut procs: Vec<Proc> = (0..8)
        .map(|i| {
            let mut c = zkr(&direct(), &["lock", &path, "--", "sh", "-c", script]);
            c.env("LOG", &log);
            Proc::spawn(&format!("zkr lock #{i}"), c)
        })
        .collect();
    // When they all finish
    for p in &mut procs {
        let code = p.wait(Duration::from_secs(30));
        assert_eq!(
            code,
            0,
            "{} exited {code}; stderr:\n{}",
            p.label,
            p.stderr()
        );
    }
    // Then the CMDs ran one at a time, with increasing fencing tokens, and no node is left
    assert_serial(&read_lines(&log), 8);
    assert_eq!(children(&path), Vec::<String>::new(), "nodes left behind");
}

#[test]
fn multi_locks_named_in_opposite_orders_never_deadlock_nor_overlap() {
    // Given two loops of `zkr lock A B` and `zkr lock B A`, each run with a deadline
    let root = unique_root("zkr-multi");
    let (a, b) = (format!("{root}/a"), format!("{root}/b"));
    let (_dir, log) = log_file();
    // CMD sees both nodes and both tokens, one per line.
    let script = r#"[ "$(printf '%s\n' "$ZK_LOCK_NODES" | wc -l)" = 2 ] || exit 9
[ "$(printf '%s\n' "$ZK_FENCING_TOKENS" | head -1)" = "$ZK_FENCING_TOKEN" ] || exit 10
echo "start $ZK_FENCING_TOKEN" >> "$LOG"; sleep 0.05; echo "end $ZK_FENCING_TOKEN" >> "$LOG""#;
    let loops: Vec<_> = [[a.clone(), b.clone()], [b.clone(), a.clone()]]
        .into_iter()
        .enumerate()
        .map(|(w, order)| {
            let log = log.clone();
            std::thread::spawn(move || {
                for round in 0..8 {
                    let mut c = zkr(
                        &direct(),
                        &[
                            "lock",
                            &order[0],
                            &order[1],
                            "--timeout",
                            "20s",
                            "--",
                            "sh",
                            "-c",
                            script,
                        ],
                    );
                    c.env("LOG", &log);
                    let mut p = Proc::spawn(&format!("loop {w} round {round}"), c);
                    let code = p.wait(Duration::from_secs(40));
                    assert_eq!(
                        code,
                        0,
                        "{} exited {code} (75: a deadlock); stderr:\n{}",
                        p.label,
                        p.stderr()
                    );
                }
            })
        })
        .collect();
    // When both loops end
    for l in loops {
        l.join().expect("a loop failed");
    }
    // Then every CMD ran alone, tokens of the first lock increase, and no node is left
    assert_serial(&read_lines(&log), 16);
    assert_eq!(children(&a), Vec::<String>::new(), "nodes left in a");
    assert_eq!(children(&b), Vec::<String>::new(), "nodes left in b");
    // And several paths with --simple are refused before connecting
    let done = run(
        "simple multi",
        zkr_bare(&["lock", &a, &b, "--simple", "--", "true"]),
        Duration::from_secs(10),
    );
    assert_eq!(done.code, 2, "stderr: {}", done.stderr);
    assert!(done.stderr.contains("--simple"), "stderr: {}", done.stderr);
}

#[test]
fn revoke_stops_a_revocable_holders_cmd_and_waits_until_it_lets_go() {
    let root = unique_root("zkr-revoke");
    let (revocable, plain) = (format!("{root}/revocable"), format!("{root}/plain"));
    let (_dir, log) = log_file();
    let script = r#"trap 'echo "term $ZK_FENCING_TOKEN" >> "$LOG"; exit 0' TERM; echo "start $ZK_FENCING_TOKEN" >> "$LOG"; sleep 30 & wait"#;
    // Given a revocable holder running CMD, and a holder that is not revocable
    let mut c = zkr(
        &direct(),
        &["lock", &revocable, "--revocable", "--", "sh", "-c", script],
    );
    c.env("LOG", &log);
    let mut holder = Proc::spawn("revocable holder", c);
    wait_for_line(&log, "start ", Duration::from_secs(20));
    let (_dir2, log2) = log_file();
    let mut c = zkr(&direct(), &["lock", &plain, "--", "sh", "-c", script]);
    c.env("LOG", &log2);
    let mut plain_holder = Proc::spawn("plain holder", c);
    wait_for_line(&log2, "start ", Duration::from_secs(20));

    // When `zkr revoke` asks the revocable one, then CMD gets SIGTERM, zkr releases and exits
    // with CMD's status, and `zkr revoke` returns 0 once the node is gone
    let done = run(
        "revoke",
        zkr(&direct(), &["revoke", &revocable, "--timeout", "20s"]),
        Duration::from_secs(30),
    );
    assert_eq!(done.code, 0, "zkr revoke: {}", done.stderr);
    assert!(done.stderr.contains("asked "), "{}", done.stderr);
    let code = holder.wait(Duration::from_secs(20));
    assert_eq!(
        code,
        0,
        "the revoked holder exited {code}: {}",
        holder.stderr()
    );
    assert!(
        holder.stderr().contains("asked to let go"),
        "{}",
        holder.stderr()
    );
    wait_for_line(&log, "term ", Duration::from_secs(5));
    assert_eq!(
        children(&revocable),
        Vec::<String>::new(),
        "a node (or the request) is left"
    );

    // And the holder that is not revocable ignores it: revoke gives up with 75
    let done = run(
        "revoke plain",
        zkr(&direct(), &["revoke", &plain, "--timeout", "1s"]),
        Duration::from_secs(20),
    );
    assert_eq!(
        done.code, 75,
        "zkr revoke of a plain holder: {}",
        done.stderr
    );
    assert!(
        plain_holder.try_status().is_none(),
        "the plain holder stopped"
    );
    assert!(
        read_lines(&log2).iter().all(|l| !l.starts_with("term")),
        "the plain CMD got SIGTERM"
    );
    plain_holder.signal(Signal::SIGTERM);
    // (its CMD traps SIGTERM and exits 0, which zkr passes on)
    assert_eq!(plain_holder.wait(Duration::from_secs(20)), 0);

    // And nobody holding is no error
    let done = run(
        "revoke free",
        zkr(&direct(), &["revoke", &revocable]),
        Duration::from_secs(20),
    );
    assert_eq!(done.code, 0, "{}", done.stderr);
    // And --revocable with --simple is a usage error
    let done = run(
        "simple revocable",
        zkr_bare(&["lock", &plain, "--simple", "--revocable", "--", "true"]),
        Duration::from_secs(10),
    );
    assert_eq!(done.code, 2, "{}", done.stderr);
}

#[test]
fn try_on_a_held_lock_exits_75_at_once_and_sigterm_reaches_cmd() {
    let path = format!("{}/job", unique_root("zkr-try"));
    let (_dir, log) = log_file();
    // Given a holder whose CMD exits 7 on SIGTERM
    let script =
        format!(r#"trap 'echo TERM >> "$LOG"; exit 7' TERM; echo start >> "$LOG"; {LOOP}"#);
    let mut c = zkr(&direct(), &["lock", &path, "--", "sh", "-c", &script]);
    c.env("LOG", &log);
    let mut holder = Proc::spawn("holder", c);
    wait_for_line(&log, "start", Duration::from_secs(10));

    // When another zkr tries the lock
    let mut c = zkr(
        &direct(),
        &[
            "lock",
            "--try",
            &path,
            "--",
            "sh",
            "-c",
            r#"echo ran >> "$LOG""#,
        ],
    );
    c.env("LOG", &log);
    let tried = run("zkr lock --try", c, Duration::from_secs(10));
    // Then it exits 75 at once, says why, and its CMD never ran
    assert_eq!(tried.code, 75, "stderr:\n{}", tried.stderr);
    assert!(
        tried.took < Duration::from_secs(3),
        "--try took {:?}",
        tried.took
    );
    assert!(tried.stderr.contains("busy"), "stderr:\n{}", tried.stderr);
    assert!(!read_lines(&log).contains(&"ran".to_string()));

    // When the holder's zkr gets SIGTERM
    holder.signal(Signal::SIGTERM);
    // Then CMD got it, and zkr exits with CMD's status after releasing the lock
    let code = holder.wait(Duration::from_secs(5));
    assert_eq!(code, 7, "stderr:\n{}", holder.stderr());
    assert!(read_lines(&log).contains(&"TERM".to_string()));
    assert_eq!(
        children(&path),
        Vec::<String>::new(),
        "the lock was not released"
    );
}

#[test]
fn timeout_exits_75_after_the_timeout_and_leaves_no_node() {
    let path = format!("{}/job", unique_root("zkr-timeout"));
    let (_dir, log) = log_file();
    let script = format!(r#"echo "node $ZK_LOCK_NODE" >> "$LOG"; {LOOP}"#);
    let mut c = zkr(&direct(), &["lock", &path, "--", "sh", "-c", &script]);
    c.env("LOG", &log);
    let _holder = Proc::spawn("holder", c);
    let holder_node = wait_for_line(&log, "node ", Duration::from_secs(10));
    let holder_node = holder_node.rsplit('/').next().unwrap().to_string();

    // When a second zkr waits at most 1s
    let waited = run(
        "zkr lock --timeout 1s",
        zkr(&direct(), &["lock", "--timeout", "1s", &path, "--", "true"]),
        Duration::from_secs(10),
    );
    // Then it exits 75 after about 1s, and only the holder's node is left
    assert_eq!(waited.code, 75, "stderr:\n{}", waited.stderr);
    assert!(
        waited.took >= Duration::from_secs(1) && waited.took < Duration::from_secs(4),
        "expected to give up after ~1s, took {:?}",
        waited.took
    );
    assert!(
        waited.stderr.contains("timed out"),
        "stderr:\n{}",
        waited.stderr
    );
    // Not on a terminal: one line when the wait starts.
    assert!(
        waited
            .stderr
            .contains(&format!("waiting for {path}: 1 ahead, held by")),
        "expected a waiting line, stderr:\n{}",
        waited.stderr
    );
    assert_eq!(children(&path), vec![holder_node]);
}

#[test]
fn a_holder_cut_off_past_the_session_timeout_stops_cmd_and_exits_76_before_the_next_holder_starts()
{
    let path = format!("{}/job", unique_root("zkr-cut"));
    let (_dir, log) = log_file();
    let proxy = FaultProxy::start(shared_server().addr()).expect("proxy");
    let via_proxy = proxy.addr().to_string();
    // Given A holding the lock through a proxy, and B waiting on a direct connection
    let script =
        format!(r#"trap 'echo A-TERM >> "$LOG"; exit 0' TERM; echo A-start >> "$LOG"; {LOOP}"#);
    let mut c = zkr(&via_proxy, &["lock", &path, "--", "sh", "-c", &script]);
    c.env("LOG", &log);
    let mut a = Proc::spawn("A (via proxy)", c);
    wait_for_line(&log, "A-start", Duration::from_secs(10));
    let mut c = zkr(
        &direct(),
        &["lock", &path, "--", "sh", "-c", r#"echo B-start >> "$LOG""#],
    );
    c.env("LOG", &log);
    let mut b = Proc::spawn("B", c);
    wait_for_children(&path, 2, Duration::from_secs(10));

    // When A's connection is cut for longer than the session timeout (2s)
    proxy.set_blocked(true);
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(status) = a.try_status() {
            break status;
        }
        assert!(
            !read_lines(&log).contains(&"B-start".to_string()),
            "B started while A was still running; stderr of A:\n{}",
            a.stderr()
        );
        assert!(Instant::now() < deadline, "A did not exit within 10s");
        std::thread::sleep(Duration::from_millis(5));
    };
    // Then A's CMD got SIGTERM and A exited 76 before B started
    let at_a_exit = read_lines(&log);
    assert_eq!(code_of(status), 76, "stderr of A:\n{}", a.stderr());
    assert_eq!(at_a_exit, ["A-start", "A-TERM"], "log when A exited");
    std::thread::sleep(Duration::from_millis(30));
    assert!(a.stderr().contains("lost"), "stderr of A:\n{}", a.stderr());
    // And B takes over once the server has expired A's session
    assert_eq!(
        b.wait(Duration::from_secs(10)),
        0,
        "stderr of B:\n{}",
        b.stderr()
    );
    assert_eq!(read_lines(&log), ["A-start", "A-TERM", "B-start"]);
}

#[test]
fn a_deleted_lock_node_stops_cmd_with_sigkill_after_the_grace() {
    let path = format!("{}/job", unique_root("zkr-deleted"));
    let (_dir, log) = log_file();
    // Given a holder whose CMD ignores SIGTERM
    let script = format!(
        r#"trap 'echo TERM-ignored >> "$LOG"' TERM; echo "pid $$" >> "$LOG"; echo "node $ZK_LOCK_NODE" >> "$LOG"; {LOOP}"#
    );
    let mut c = zkr(
        &direct(),
        &["lock", "--grace", "500ms", &path, "--", "sh", "-c", &script],
    );
    c.env("LOG", &log);
    let mut a = Proc::spawn("holder", c);
    let node = wait_for_line(&log, "node ", Duration::from_secs(10))[5..].to_string();
    let cmd_pid: i32 = wait_for_line(&log, "pid ", Duration::from_secs(1))[4..]
        .parse()
        .unwrap();

    // When someone else deletes its node
    let deleted_at = Instant::now();
    with_client({
        let node = node.clone();
        move |c| Box::pin(async move { c.delete(&node, None).await })
    })
    .unwrap_or_else(|e| panic!("delete {node}: {e}"));

    // Then CMD gets SIGTERM at once, SIGKILL after the 500ms grace, and zkr exits 76
    wait_for_line(&log, "TERM-ignored", Duration::from_secs(2));
    assert_eq!(
        a.wait(Duration::from_secs(5)),
        76,
        "stderr:\n{}",
        a.stderr()
    );
    let took = deleted_at.elapsed();
    assert!(
        took >= Duration::from_millis(500) && took < Duration::from_secs(3),
        "expected zkr to exit once the 500ms grace was over, took {took:?}"
    );
    assert!(
        a.stderr().contains("SIGKILL") && a.stderr().contains("deleted"),
        "stderr:\n{}",
        a.stderr()
    );
    // No signal: only checks that the process exists.
    let alive = kill(Pid::from_raw(cmd_pid), None).is_ok();
    assert!(!alive, "CMD (pid {cmd_pid}) survived SIGKILL");
}

fn pause_kills_cmd_on_resume(policy: &str) {
    let path = format!("{}/job", unique_root("zkr-pause"));
    let (_dir, log) = log_file();
    let script =
        format!(r#"trap 'echo TERM >> "$LOG"; exit 0' TERM; echo start >> "$LOG"; {LOOP}"#);
    let mut c = zkr(
        &direct(),
        &[
            "--loss-policy",
            policy,
            "lock",
            &path,
            "--",
            "sh",
            "-c",
            &script,
        ],
    );
    c.env("LOG", &log);
    let mut a = Proc::spawn("paused zkr", c);
    wait_for_line(&log, "start", Duration::from_secs(10));

    // When zkr itself is stopped past the session timeout (2s) while its CMD runs on
    a.signal(Signal::SIGSTOP);
    std::thread::sleep(Duration::from_secs(3));
    assert!(!read_lines(&log).contains(&"TERM".to_string()));
    let resumed = Instant::now();
    a.signal(Signal::SIGCONT);

    // Then CMD is stopped as soon as zkr runs again, and zkr exits 76
    wait_for_line(&log, "TERM", Duration::from_secs(5));
    let after = resumed.elapsed();
    assert!(
        after < Duration::from_secs(1),
        "CMD got SIGTERM {after:?} after zkr resumed; expected at once"
    );
    assert_eq!(
        a.wait(Duration::from_secs(5)),
        76,
        "stderr:\n{}",
        a.stderr()
    );
    if policy == "expiry" {
        // The session manager waits for the server's word under `expiry`: it was zkr's own
        // clock check that acted.
        assert!(
            a.stderr().contains("paused"),
            "expected zkr's pause check to act, stderr:\n{}",
            a.stderr()
        );
    }
}

#[test]
fn a_paused_zkr_kills_cmd_as_soon_as_it_resumes() {
    pause_kills_cmd_on_resume("grace");
}

#[test]
fn a_paused_zkr_kills_cmd_on_resume_by_its_own_clock_check() {
    pause_kills_cmd_on_resume("expiry");
}

#[test]
fn cmd_gets_the_lock_environment_and_its_status_is_passed_on() {
    let path = format!("{}/env", unique_root("zkr-env"));
    let (_dir, log) = log_file();
    // Given a CMD that records its environment, waits for the test to look, and exits 3
    let script = r#"printf '%s\n' "path $ZK_LOCK_PATH" "node $ZK_LOCK_NODE" "token $ZK_FENCING_TOKEN" "session $ZK_SESSION_ID" >> "$LOG"
i=0; while [ ! -e "$LOG.go" ] && [ $i -lt 100 ]; do sleep 0.05; i=$((i+1)); done; exit 3"#;
    let mut c = zkr(
        &direct(),
        &["lock", "--layout", "kazoo", &path, "--", "sh", "-c", script],
    );
    c.env("LOG", &log);
    let mut p = Proc::spawn("zkr lock --layout kazoo", c);
    wait_for_line(&log, "session ", Duration::from_secs(10));
    let lines = read_lines(&log);
    let get = |k: &str| {
        lines
            .iter()
            .find_map(|l| l.strip_prefix(&format!("{k} ")))
            .unwrap_or_else(|| panic!("no {k} in {lines:?}"))
            .to_string()
    };
    let (node, token, session) = (get("node"), get("token"), get("session"));
    assert_eq!(get("path"), path);
    let name = node
        .strip_prefix(&format!("{path}/"))
        .unwrap_or_else(|| panic!("ZK_LOCK_NODE {node:?} is not under {path}"));
    assert!(
        name.contains("__lock__"),
        "--layout kazoo should name the node <hex>__lock__<seq>: {name}"
    );
    let token: i64 = token.parse().expect("ZK_FENCING_TOKEN is decimal");
    let session = i64::from_str_radix(
        session
            .strip_prefix("0x")
            .unwrap_or_else(|| panic!("ZK_SESSION_ID {session:?} is not 0x-hex")),
        16,
    )
    .expect("ZK_SESSION_ID is hex");
    // Then the node exists, is owned by that session, and its czxid is the fencing token
    let stat = with_client({
        let node = node.clone();
        move |c| Box::pin(async move { c.get_data(&node).await.map(|(_, s)| s) })
    })
    .unwrap_or_else(|e| panic!("get_data({node}): {e}"));
    assert_eq!(stat.czxid, token);
    assert_eq!(stat.ephemeral_owner, session);

    std::fs::write(log.with_extension("go"), "").unwrap();
    // Then zkr exits with CMD's status
    assert_eq!(
        p.wait(Duration::from_secs(10)),
        3,
        "stderr:\n{}",
        p.stderr()
    );

    // And a CMD ended by a signal gives 128+N
    let killed = run(
        "zkr lock (CMD killed)",
        zkr(
            &direct(),
            &["lock", &path, "--", "sh", "-c", "kill -USR1 $$"],
        ),
        Duration::from_secs(10),
    );
    assert_eq!(
        killed.code,
        128 + Signal::SIGUSR1 as i32,
        "stderr:\n{}",
        killed.stderr
    );
    // And a CMD that cannot be found gives 127
    let missing = run(
        "zkr lock (no CMD)",
        zkr(&direct(), &["lock", &path, "--", "/nonexistent/cmd"]),
        Duration::from_secs(10),
    );
    assert_eq!(missing.code, 127, "stderr:\n{}", missing.stderr);
    assert!(missing.stderr.contains("cannot run"));
    assert_eq!(children(&path), Vec::<String>::new());
}

#[test]
fn semaphore_and_simple_lock_limit_concurrency() {
    let root = unique_root("zkr-sem");
    let (_dir, log) = log_file();
    // Given five processes on a 2-permit semaphore
    let sem = format!("{root}/slots");
    let script = r#"echo "+ $$" >> "$LOG"; sleep 0.4; echo "- $$" >> "$LOG""#;
    let mut procs: Vec<Proc> = (0..5)
        .map(|i| {
            let mut c = zkr(
                &direct(),
                &["lock", "--permits", "2", &sem, "--", "sh", "-c", script],
            );
            c.env("LOG", &log);
            Proc::spawn(&format!("zkr lock --permits 2 #{i}"), c)
        })
        .collect();
    for p in &mut procs {
        assert_eq!(
            p.wait(Duration::from_secs(30)),
            0,
            "stderr:\n{}",
            p.stderr()
        );
    }
    // Then at most two ran at once (and two did)
    let max_running = |lines: &[String]| {
        let (mut now, mut max) = (0i32, 0i32);
        for l in lines {
            now += if l.starts_with('+') { 1 } else { -1 };
            max = max.max(now);
        }
        max
    };
    assert_eq!(
        max_running(&read_lines(&log)),
        2,
        "log:\n{}",
        read_lines(&log).join("\n")
    );

    // Given three processes on the simple lock
    std::fs::write(&log, "").unwrap();
    let simple = format!("{root}/simple");
    let mut procs: Vec<Proc> = (0..3)
        .map(|i| {
            let mut c = zkr(
                &direct(),
                &["lock", "--simple", &simple, "--", "sh", "-c", script],
            );
            c.env("LOG", &log);
            Proc::spawn(&format!("zkr lock --simple #{i}"), c)
        })
        .collect();
    for p in &mut procs {
        assert_eq!(
            p.wait(Duration::from_secs(30)),
            0,
            "stderr:\n{}",
            p.stderr()
        );
    }
    // Then they ran one at a time
    assert_eq!(
        max_running(&read_lines(&log)),
        1,
        "log:\n{}",
        read_lines(&log).join("\n")
    );
    assert_eq!(read_lines(&log).len(), 6);
}

#[test]
fn readers_share_and_writers_exclude() {
    let path = format!("{}/table", unique_root("zkr-rw"));
    let (_dir, log) = log_file();
    let script =
        |who: &str| format!(r#"echo "+ {who}" >> "$LOG"; sleep 1; echo "- {who}" >> "$LOG""#);
    let spawn = |mode: &str, who: &str| {
        let mut c = zkr(&direct(), &[mode, &path, "--", "sh", "-c", &script(who)]);
        c.env("LOG", &log);
        Proc::spawn(&format!("zkr {mode} {who}"), c)
    };
    // Given two readers, then a writer queued behind them, then a third reader
    let mut r1 = spawn("read", "r1");
    let mut r2 = spawn("read", "r2");
    wait_for_line(&log, "+ r", Duration::from_secs(10));
    let mut w = spawn("write", "w");
    wait_for_children(&path, 3, Duration::from_secs(10));
    let mut r3 = spawn("read", "r3");
    for p in [&mut r1, &mut r2, &mut w, &mut r3] {
        assert_eq!(
            p.wait(Duration::from_secs(20)),
            0,
            "stderr:\n{}",
            p.stderr()
        );
    }
    // Then r1 and r2 overlapped, the writer ran alone, and r3 came after the writer
    let lines = read_lines(&log);
    let at = |l: &str| {
        lines
            .iter()
            .position(|x| x == l)
            .unwrap_or_else(|| panic!("no {l:?} in {lines:?}"))
    };
    assert!(
        at("+ r1").max(at("+ r2")) < at("- r1").min(at("- r2")),
        "readers did not share: {lines:?}"
    );
    assert_eq!(
        at("- w"),
        at("+ w") + 1,
        "the writer overlapped someone: {lines:?}"
    );
    assert!(
        at("+ w") > at("- r1").max(at("- r2")),
        "the writer ran with readers: {lines:?}"
    );
    assert!(
        at("+ r3") > at("- w"),
        "r3 overtook the waiting writer: {lines:?}"
    );
}

// ------------------------------------------------------------------------------------------
// Supervision: nothing of CMD outlives zkr; stops; the terminal
// ------------------------------------------------------------------------------------------

/// Whether `pid` runs (exists and is not a zombie waiting to be reaped).
fn running(pid: i32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    let state = stat
        .rfind(')')
        .and_then(|i| stat[i + 1..].split_whitespace().next())
        .unwrap_or("?");
    state != "Z"
}

/// The pids a CMD wrote to the log as `NAME PID` lines.
fn pid_of(log: &Path, name: &str) -> i32 {
    let line = wait_for_line(log, &format!("{name} "), Duration::from_secs(10));
    line[name.len() + 1..]
        .trim()
        .parse()
        .unwrap_or_else(|e| panic!("bad pid line {line:?}: {e}"))
}

#[test]
fn kill_9_of_zkr_leaves_nothing_of_cmd_running() {
    let path = format!("{}/job", unique_root("zkr-kill9"));
    // Given a CMD that starts a child in its group and one that leaves the group (setsid)
    let (_dir, mut a, pids) = start_escaping(&path);
    for (name, pid) in &pids {
        assert!(
            running(*pid),
            "{name} (pid {pid}) does not run before the kill"
        );
    }

    // When zkr is killed with SIGKILL
    a.signal(Signal::SIGKILL);
    assert_eq!(a.wait(Duration::from_secs(5)), -(Signal::SIGKILL as i32));

    // Then within 1s nothing that CMD started runs any more
    let deadline = Instant::now() + Duration::from_secs(1);
    loop {
        let alive: Vec<_> = pids.iter().filter(|(_, pid)| running(*pid)).collect();
        if alive.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "still running 1s after zkr was killed: {alive:?}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn sigterm_stops_a_cmd_that_ignores_it_with_sigkill_after_the_grace_then_releases() {
    let path = format!("{}/job", unique_root("zkr-term-grace"));
    let (_dir, log) = log_file();
    // Given a holder whose CMD ignores SIGTERM
    let script =
        format!(r#"trap 'echo TERM-ignored >> "$LOG"' TERM; echo "cmd $$" >> "$LOG"; {LOOP}"#);
    let mut c = zkr(
        &direct(),
        &["lock", "--grace", "500ms", &path, "--", "sh", "-c", &script],
    );
    c.env("LOG", &log);
    let mut a = Proc::spawn("zkr lock --grace 500ms", c);
    let cmd_pid = pid_of(&log, "cmd");
    wait_for_children(&path, 1, Duration::from_secs(5));

    // When zkr gets SIGTERM
    a.signal(Signal::SIGTERM);

    // Then CMD gets SIGTERM, ignores it, is SIGKILLed after the grace, and zkr exits with
    // CMD's status (128+9) once the lock is released
    wait_for_line(&log, "TERM-ignored", Duration::from_secs(2));
    assert_eq!(
        a.wait(Duration::from_secs(5)),
        128 + Signal::SIGKILL as i32,
        "stderr:\n{}",
        a.stderr()
    );
    assert!(a.stderr().contains("SIGKILL"), "stderr:\n{}", a.stderr());
    assert!(!running(cmd_pid), "CMD (pid {cmd_pid}) survived");
    assert_eq!(
        children(&path),
        Vec::<String>::new(),
        "the lock was not released"
    );
}

#[test]
fn what_cmd_leaves_behind_is_stopped_before_the_release() {
    let path = format!("{}/job", unique_root("zkr-leftover"));
    let (_dir, log) = log_file();
    // Given a CMD that starts a background job and exits 3 at once
    let script = format!(r#"sh -c '{LOOP}' & echo "bg $!" >> "$LOG"; exit 3"#);
    let mut c = zkr(
        &direct(),
        &["lock", "--grace", "500ms", &path, "--", "sh", "-c", &script],
    );
    c.env("LOG", &log);
    let done = run("zkr lock", c, Duration::from_secs(10));
    // Then zkr exits with CMD's status, and the background job was stopped first
    assert_eq!(done.code, 3, "stderr:\n{}", done.stderr);
    let bg = pid_of(&log, "bg");
    assert!(!running(bg), "CMD's background job (pid {bg}) outlived zkr");
    assert!(
        done.stderr.contains("still run"),
        "expected a note on the processes left behind, stderr:\n{}",
        done.stderr
    );
}

/// Quotes `s` for sh.
fn sh_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// Runs `zkr ARGS...` in a pseudo-terminal (util-linux `script`), feeding it `input` in
/// steps: `(delay, bytes)`. Returns the exit status and what the terminal showed.
fn in_terminal(args: &[&str], input: &[(Duration, &str)], within: Duration) -> Done {
    let mut line = format!(
        "exec {} --connect {} --session-timeout 2s",
        sh_quote(ZKR),
        sh_quote(&direct())
    );
    for a in args {
        line.push(' ');
        line.push_str(&sh_quote(a));
    }
    let mut c = Command::new("script");
    c.args(["-q", "-e", "-c", &line, "/dev/null"])
        .env_remove("ZK_CONNECT")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let started = Instant::now();
    let mut child = c.spawn().unwrap_or_else(|e| {
        panic!("cannot run `script` (util-linux; apt-get install -y bsdutils): {e}")
    });
    let mut stdin = child.stdin.take().unwrap();
    let stdout = collect(child.stdout.take().unwrap());
    let stderr = collect(child.stderr.take().unwrap());
    let mut p = Proc {
        label: format!("zkr {args:?} in a terminal"),
        child,
        stdout: stdout.clone(),
        stderr: stderr.clone(),
        status: None,
    };
    for (delay, bytes) in input {
        std::thread::sleep(*delay);
        use std::io::Write;
        let _ = stdin.write_all(bytes.as_bytes());
        let _ = stdin.flush();
    }
    let deadline = Instant::now() + within;
    while p.try_status().is_none() {
        assert!(
            Instant::now() < deadline,
            "expected {} to exit within {within:?}; the terminal showed:\n{}",
            p.label,
            p.stdout()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let code = p.wait(Duration::from_secs(1));
    drop(stdin);
    Done {
        code,
        stdout: p.stdout(),
        stderr: p.stderr(),
        took: started.elapsed(),
    }
}

#[test]
fn an_interactive_cmd_reads_the_terminal() {
    let path = format!("{}/tty", unique_root("zkr-tty"));
    // Given `zkr lock` on a terminal whose CMD reads a line from it
    // When a line is typed
    let done = in_terminal(
        &["lock", &path, "--", "sh", "-c", "read a; echo got $a"],
        &[(Duration::from_millis(1500), "hello\n")],
        Duration::from_secs(15),
    );
    // Then CMD reads it (it owns the terminal's foreground) and zkr exits with its status
    assert!(
        done.stdout.contains("got hello"),
        "expected CMD to read the line; the terminal showed:\n{}\nstderr:\n{}",
        done.stdout,
        done.stderr
    );
    assert_eq!(done.code, 0, "the terminal showed:\n{}", done.stdout);
    assert_eq!(children(&path), Vec::<String>::new());
}

#[test]
fn ctrl_c_and_ctrl_z_on_the_terminal_reach_cmd() {
    let path = format!("{}/tty", unique_root("zkr-tty-keys"));
    // Given CMD reading the terminal, with zkr's process group orphaned (`script` makes it a
    // session of its own), where job control cannot stop zkr
    // When Ctrl-Z is typed, then a line
    let done = in_terminal(
        &["lock", &path, "--", "sh", "-c", "read a; echo got $a"],
        &[
            (Duration::from_millis(1500), "\x1a"),
            (Duration::from_millis(500), "after-z\n"),
        ],
        Duration::from_secs(15),
    );
    // Then CMD was stopped and continued (no shell could have done it), and read the line
    assert!(
        done.stdout.contains("got after-z"),
        "expected CMD to go on after Ctrl-Z; the terminal showed:\n{}\nstderr:\n{}",
        done.stdout,
        done.stderr
    );
    assert_eq!(done.code, 0, "the terminal showed:\n{}", done.stdout);

    // When Ctrl-C is typed while CMD waits for a line
    let done = in_terminal(
        &["lock", &path, "--", "sh", "-c", "read a; echo got $a"],
        &[(Duration::from_millis(1500), "\x03")],
        Duration::from_secs(15),
    );
    // Then CMD dies of SIGINT, zkr passes its status on, and releases
    assert_eq!(
        done.code,
        128 + Signal::SIGINT as i32,
        "the terminal showed:\n{}\nstderr:\n{}",
        done.stdout,
        done.stderr
    );
    assert!(!done.stdout.contains("got"), "{}", done.stdout);
    assert_eq!(children(&path), Vec::<String>::new());
}

// ------------------------------------------------------------------------------------------
// Elections
// ------------------------------------------------------------------------------------------

#[test]
fn elect_runs_one_leader_at_a_time_and_leader_reports_it() {
    let path = format!("{}/leader", unique_root("zkr-elect"));
    let (_dir, log) = log_file();
    // Given a watcher and three candidates
    let mut watcher = Proc::spawn(
        "zkr leader --watch",
        zkr(&direct(), &["leader", "--watch", &path]),
    );
    let script = r#"echo "start $ZK_LEADER_ID $ZK_FENCING_TOKEN" >> "$LOG"; sleep 0.3; echo "end $ZK_LEADER_ID $ZK_FENCING_TOKEN" >> "$LOG""#;
    let mut candidates: Vec<Proc> = (1..=3)
        .map(|i| {
            let id = format!("c{i}");
            let mut c = zkr(
                &direct(),
                &["elect", &path, "--id", &id, "--", "sh", "-c", script],
            );
            c.env("LOG", &log);
            Proc::spawn(&format!("zkr elect {id}"), c)
        })
        .collect();
    for p in &mut candidates {
        assert_eq!(
            p.wait(Duration::from_secs(20)),
            0,
            "stderr:\n{}",
            p.stderr()
        );
    }
    // Then they led one at a time, each with a larger token
    let lines = read_lines(&log);
    let pairs: Vec<String> = lines
        .iter()
        .map(|l| {
            let mut f = l.split(' ');
            format!("{} {}", f.next().unwrap(), f.nth(1).unwrap())
        })
        .collect();
    assert_serial(&pairs, 3);
    let order: Vec<&str> = lines
        .iter()
        .filter_map(|l| l.strip_prefix("start "))
        .map(|l| l.split(' ').next().unwrap())
        .collect();
    // And the watcher saw each leader in turn
    let deadline = Instant::now() + Duration::from_secs(5);
    let seen = loop {
        let out = watcher.stdout();
        let mut seen: Vec<String> = out
            .lines()
            .filter(|l| *l != "(none)")
            .map(str::to_string)
            .collect();
        seen.dedup();
        if (seen.len() >= 3 && out.ends_with("(none)\n")) || Instant::now() >= deadline {
            break seen;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(seen, order, "watcher output:\n{}", watcher.stdout());
    watcher.signal(Signal::SIGINT);
    assert_eq!(watcher.wait(Duration::from_secs(5)), 0);
    assert!(
        watcher.stdout().ends_with("(none)\n"),
        "{}",
        watcher.stdout()
    );

    // Given a long-running leader
    let script = format!(r#"echo "start $ZK_LEADER_ID" >> "$LOG"; {LOOP}"#);
    let mut c = zkr(
        &direct(),
        &["elect", &path, "--id", "c4", "--", "sh", "-c", &script],
    );
    c.env("LOG", &log);
    let mut c4 = Proc::spawn("zkr elect c4", c);
    wait_for_line(&log, "start c4", Duration::from_secs(10));
    // Then `zkr leader` names it, in text and JSON
    let now = run(
        "zkr leader",
        zkr(&direct(), &["leader", &path]),
        Duration::from_secs(10),
    );
    assert_eq!(
        (now.code, now.stdout.as_str()),
        (0, "c4\n"),
        "stderr:\n{}",
        now.stderr
    );
    let json = run(
        "zkr leader --json",
        zkr(&direct(), &["leader", "--json", &path]),
        Duration::from_secs(10),
    );
    let v: Value = serde_json::from_str(&json.stdout).expect("leader --json prints JSON");
    assert_eq!(v["leader"]["id"], "c4");
    assert_eq!(v["path"], path.as_str());
    // When it is stopped, there is no leader: status 1
    c4.signal(Signal::SIGTERM);
    assert_eq!(
        c4.wait(Duration::from_secs(5)),
        128 + Signal::SIGTERM as i32
    );
    let none = run(
        "zkr leader",
        zkr(&direct(), &["leader", &path]),
        Duration::from_secs(10),
    );
    assert_eq!(
        (none.code, none.stdout.as_str()),
        (1, ""),
        "stderr:\n{}",
        none.stderr
    );
}

// ------------------------------------------------------------------------------------------
// holders
// ------------------------------------------------------------------------------------------

#[test]
fn holders_shows_curator_and_kazoo_contenders_with_kind_and_layout() {
    let path = format!("{}/mixed", unique_root("zkr-holders"));
    let cs = direct();
    // Given a Curator InterProcessMutex holding the lock and a kazoo Lock waiting for it
    let mut curator = Peer::curator("curator", &["hold", &cs, &path, "cur-1"]);
    curator.wait_ready(Duration::from_secs(60));
    curator.wait_acquired(Duration::from_secs(30));
    let mut kazoo = Peer::kazoo("kazoo", &["hold", &cs, &path, "kaz-1"]);
    kazoo.wait_ready(Duration::from_secs(30));
    assert!(
        kazoo
            .wait_for(Duration::from_secs(10), |l| matches!(
                l,
                InteropLine::Req { .. }
            ))
            .is_some(),
        "kazoo did not ask for the lock"
    );
    wait_for_children(&path, 2, Duration::from_secs(10));

    // When zkr lists them
    let out = run(
        "zkr holders --json",
        zkr(&cs, &["holders", "--json", &path]),
        Duration::from_secs(10),
    );
    assert_eq!(out.code, 0, "stderr:\n{}", out.stderr);
    let v: Value = serde_json::from_str(&out.stdout).expect("holders --json prints JSON");
    let list = v["contenders"].as_array().expect("contenders array");
    // Then the Curator holder comes first and the kazoo waiter second, each with its layout
    assert_eq!(list.len(), 2, "{v:#}");
    let field = |i: usize, k: &str| list[i][k].as_str().unwrap_or_default().to_string();
    assert_eq!(
        [field(0, "kind"), field(0, "layout"), field(0, "role")],
        ["lock", "curator", "holder"],
        "{v:#}"
    );
    assert_eq!(
        [
            field(1, "kind"),
            field(1, "layout"),
            field(1, "role"),
            field(1, "data")
        ],
        ["lock", "kazoo", "waiter", "kaz-1"],
        "{v:#}"
    );
    assert!(field(0, "node").starts_with("_c_") && field(0, "node").contains("-lock-"));
    assert!(field(1, "node").contains("__lock__"));
    assert!(field(0, "owner").starts_with("0x") && field(0, "owner") != field(1, "owner"));
    // And the table says the same
    let table = run(
        "zkr holders",
        zkr(&cs, &["holders", &path]),
        Duration::from_secs(10),
    );
    assert_eq!(table.code, 0, "stderr:\n{}", table.stderr);
    let rows: Vec<&str> = table.stdout.lines().collect();
    assert_eq!(rows.len(), 3, "{}", table.stdout);
    assert!(rows[0].contains("NODE") && rows[0].contains("KIND") && rows[0].contains("OWNER"));
    assert!(
        rows[1].contains("holder") && rows[1].contains("curator"),
        "{}",
        table.stdout
    );
    assert!(
        rows[2].contains("waiter") && rows[2].contains("kazoo") && rows[2].contains("kaz-1"),
        "{}",
        table.stdout
    );
    curator.close_stdin();
    kazoo.close_stdin();
    drop(curator.finish(Duration::from_secs(10)));
    drop(kazoo.finish(Duration::from_secs(10)));
}

// ------------------------------------------------------------------------------------------
// Errors, server
// ------------------------------------------------------------------------------------------

#[test]
fn error_paths_print_a_message_and_the_documented_status() {
    let cases: Vec<(&str, Command, i32, &str)> = vec![
        (
            "no --connect and no ZK_CONNECT",
            zkr_bare(&["lock", "/a", "--", "true"]),
            2,
            "ZK_CONNECT",
        ),
        (
            "malformed path",
            zkr(&direct(), &["lock", "jobs/nightly", "--", "true"]),
            2,
            "invalid path",
        ),
        (
            "empty segment",
            zkr(&direct(), &["holders", "/a//b"]),
            2,
            "invalid path",
        ),
        (
            "--timeout with --try",
            zkr(
                &direct(),
                &["lock", "/a", "--try", "--timeout", "1s", "--", "true"],
            ),
            2,
            "cannot be used with",
        ),
        (
            "a duration without a unit",
            zkr(&direct(), &["lock", "/a", "--timeout", "10", "--", "true"]),
            2,
            "no unit",
        ),
        ("no CMD", zkr(&direct(), &["lock", "/a"]), 2, "CMD"),
        (
            "--simple with --permits",
            zkr(
                &direct(),
                &["lock", "/a", "--simple", "--permits", "2", "--", "true"],
            ),
            2,
            "cannot be used with",
        ),
        (
            "--permits 0",
            zkr(&direct(), &["lock", "/a", "--permits", "0", "--", "true"]),
            2,
            "--permits",
        ),
        (
            "a port that is not a number",
            zkr("127.0.0.1:x", &["holders", "/a"]),
            2,
            "\"x\" is not a port number",
        ),
        (
            "an empty server entry",
            zkr("127.0.0.1:2181,,h:1", &["holders", "/a"]),
            2,
            "empty server entry",
        ),
        (
            "a zero session timeout",
            zkr_bare(&[
                "--connect",
                "127.0.0.1:1",
                "--session-timeout",
                "0s",
                "holders",
                "/a",
            ]),
            2,
            "from 100ms to 1h",
        ),
        (
            "an empty --id",
            zkr(&direct(), &["elect", "/a", "--id", "", "--", "true"]),
            2,
            "--id",
        ),
        (
            "a host name that does not resolve",
            zkr("no-such-host.invalid:2181", &["holders", "/a"]),
            69,
            "cannot resolve the ZooKeeper host name (DNS): no-such-host.invalid:2181",
        ),
        // ZooKeeper's reserved tree is a usage error found before connecting: 2 even with
        // no server there (it was 69, the unreachable server's, until the sixth session).
        (
            "a lock in the reserved tree, no server",
            zkr("127.0.0.1:1", &["lock", "/zookeeper/jobs", "--", "true"]),
            2,
            "reserved /zookeeper tree",
        ),
        (
            "an election under a chroot of /zookeeper, no server",
            zkr(
                "127.0.0.1:1/zookeeper",
                &["elect", "/quota", "--id", "a", "--", "true"],
            ),
            2,
            "reserved /zookeeper tree",
        ),
        (
            "a second lock path in the reserved tree, no server",
            zkr(
                "127.0.0.1:1",
                &["lock", "/jobs", "/zookeeper", "--", "true"],
            ),
            2,
            "reserved /zookeeper tree",
        ),
        // Reading it is allowed: the unreachable server's 69.
        (
            "holders of the reserved tree, no server",
            zkr("127.0.0.1:1", &["holders", "/zookeeper"]),
            69,
            "cannot reach ZooKeeper",
        ),
        (
            "a chroot that does not exist",
            zkr(
                &direct(),
                &["--chroot", &unique_root("zkr-nochroot"), "holders", "/a"],
            ),
            2,
            "chroot",
        ),
    ];
    for (what, cmd, want, needle) in cases {
        let out = run(what, cmd, Duration::from_secs(10));
        assert_eq!(
            out.code, want,
            "{what}: expected status {want}, got {}; stderr:\n{}",
            out.code, out.stderr
        );
        assert!(
            out.stderr.contains(needle),
            "{what}: expected {needle:?} in stderr:\n{}",
            out.stderr
        );
    }

    // ZK_CONNECT stands in for --connect
    let mut c = zkr_bare(&["holders", &format!("{}/x", unique_root("zkr-env"))]);
    c.env("ZK_CONNECT", direct());
    let out = run("ZK_CONNECT", c, Duration::from_secs(10));
    assert_eq!(out.code, 0, "stderr:\n{}", out.stderr);

    // An unreachable ZooKeeper: 69 once the connect timeout (the 2s session timeout) is up
    let out = run(
        "unreachable",
        zkr("127.0.0.1:1", &["lock", "/a", "--", "true"]),
        Duration::from_secs(10),
    );
    assert_eq!(out.code, 69, "stderr:\n{}", out.stderr);
    assert!(
        out.stderr.contains("cannot reach ZooKeeper")
            && out.stderr.contains("connection refused by 127.0.0.1:1"),
        "stderr:\n{}",
        out.stderr
    );
    assert!(
        !out.stderr.contains("with_") && !out.stderr.contains("Session"),
        "a library name in the message:\n{}",
        out.stderr
    );

    // A host without a port means ZooKeeper's 2181
    let out = run(
        "no port",
        zkr("127.0.0.1", &["holders", "/a"]),
        Duration::from_secs(10),
    );
    assert!(
        out.code == 0 || out.stderr.contains("127.0.0.1:2181"),
        "expected port 2181 (a server there, or a message naming it), got {}; stderr:\n{}",
        out.code,
        out.stderr
    );
    assert!(
        out.took >= Duration::from_millis(1900) && out.took < Duration::from_secs(4),
        "expected to give up after the 2s connect timeout, took {:?}",
        out.took
    );
}

#[test]
fn server_prints_its_connect_string_and_stops_on_sigterm() {
    // Given `zkr server`
    let mut server = Proc::spawn("zkr server", zkr_bare(&["server"]));
    let deadline = Instant::now() + Duration::from_secs(60);
    let connect = loop {
        if let Some(line) = server.stdout().lines().next() {
            break line.to_string();
        }
        assert!(
            server.try_status().is_none(),
            "zkr server exited; stderr:\n{}",
            server.stderr()
        );
        assert!(Instant::now() < deadline, "no connect string within 60s");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(connect.starts_with("127.0.0.1:"), "{connect}");
    // Then it serves
    let out = run(
        "zkr lock (private server)",
        zkr(&connect, &["lock", "/try-it", "--", "true"]),
        Duration::from_secs(10),
    );
    assert_eq!(out.code, 0, "stderr:\n{}", out.stderr);
    // When it gets SIGTERM it stops, and the JVM with it
    server.signal(Signal::SIGTERM);
    assert_eq!(
        server.wait(Duration::from_secs(15)),
        0,
        "stderr:\n{}",
        server.stderr()
    );
    let addr: std::net::SocketAddr = connect.parse().unwrap();
    assert!(
        std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(1)).is_err(),
        "the ZooKeeper JVM still listens on {connect}"
    );
}

// ------------------------------------------------------------------------------------------
// Exit statuses, the granted session timeout, logs, the waiting line
// ------------------------------------------------------------------------------------------

#[test]
fn conflict_and_lost_exit_codes_can_be_chosen_and_cmds_own_status_is_untouched() {
    let path = format!("{}/job", unique_root("zkr-codes"));
    let (_dir, log) = log_file();
    // Given a holder that records its node, started with --lost-exit-code 86
    let script = format!(r#"echo "node $ZK_LOCK_NODE" >> "$LOG"; {LOOP}"#);
    let mut c = zkr(
        &direct(),
        &[
            "lock",
            "--lost-exit-code",
            "86",
            "--grace",
            "200ms",
            &path,
            "--",
            "sh",
            "-c",
            &script,
        ],
    );
    c.env("LOG", &log);
    let mut holder = Proc::spawn("holder", c);
    let node = wait_for_line(&log, "node ", Duration::from_secs(10))[5..].to_string();

    // When another zkr tries with --conflict-exit-code 99
    let tried = run(
        "zkr lock --try --conflict-exit-code 99",
        zkr(
            &direct(),
            &[
                "lock",
                "--try",
                "--conflict-exit-code",
                "99",
                &path,
                "--",
                "true",
            ],
        ),
        Duration::from_secs(10),
    );
    // Then it exits 99, not 75
    assert_eq!(tried.code, 99, "stderr:\n{}", tried.stderr);
    assert!(tried.stderr.contains("busy"), "stderr:\n{}", tried.stderr);

    // When the holder's node is deleted under it
    with_client({
        let node = node.clone();
        move |c| Box::pin(async move { c.delete(&node, None).await })
    })
    .unwrap_or_else(|e| panic!("delete {node}: {e}"));
    // Then the holder exits 86, not 76
    assert_eq!(
        holder.wait(Duration::from_secs(5)),
        86,
        "stderr:\n{}",
        holder.stderr()
    );

    // And a CMD that itself exits 75 or 76 is passed on as it is
    for own in ["75", "76"] {
        let done = run(
            "zkr lock -- exit N",
            zkr(
                &direct(),
                &[
                    "lock",
                    "--conflict-exit-code",
                    "99",
                    "--lost-exit-code",
                    "86",
                    &path,
                    "--",
                    "sh",
                    "-c",
                    &format!("exit {own}"),
                ],
            ),
            Duration::from_secs(10),
        );
        assert_eq!(done.code.to_string(), own, "stderr:\n{}", done.stderr);
    }
}

#[test]
fn the_granted_session_timeout_is_warned_about_and_drives_the_pause_check() {
    use zk_recipes::testing::{ServerOptions, ZooKeeperServer};
    // Given a server that grants at most 4s
    let server = ZooKeeperServer::start_with(
        ServerOptions::new().with_config_line("maxSessionTimeout=4000"),
    )
    .expect("a ZooKeeper server with maxSessionTimeout=4000");
    let path = format!("{}/job", unique_root("zkr-granted"));
    let (_dir, log) = log_file();
    let script =
        format!(r#"trap 'echo TERM >> "$LOG"; exit 0' TERM; echo start >> "$LOG"; {LOOP}"#);
    // When zkr asks for 60s (and trusts only its own clock: --loss-policy expiry)
    let mut c = Command::new(ZKR);
    c.env_remove("ZK_CONNECT")
        .env("LOG", &log)
        .args(["--connect", &server.connect_string()])
        .args(["--session-timeout", "60s", "--loss-policy", "expiry"])
        .args(["lock", &path, "--", "sh", "-c", &script]);
    let mut a = Proc::spawn("zkr --session-timeout 60s", c);
    wait_for_line(&log, "start", Duration::from_secs(10));
    // Then it says once that it got 4s
    let stderr = a.stderr();
    assert_eq!(
        stderr.matches("granted a session timeout of 4.0s").count(),
        1,
        "expected one warning about the granted timeout, stderr:\n{stderr}"
    );
    assert!(stderr.contains("1m00s"), "stderr:\n{stderr}");

    // When zkr is stopped for 4.5s: past the 4s granted, far below the 60s asked for
    a.signal(Signal::SIGSTOP);
    std::thread::sleep(Duration::from_millis(4500));
    assert!(
        !read_lines(&log).contains(&"TERM".to_string()),
        "CMD was stopped before zkr was; stderr:\n{}",
        a.stderr()
    );
    let resumed = Instant::now();
    a.signal(Signal::SIGCONT);
    // Then its pause check stops CMD at once, measured against the granted 4s
    wait_for_line(&log, "TERM", Duration::from_secs(5));
    assert!(
        resumed.elapsed() < Duration::from_secs(1),
        "CMD got SIGTERM {:?} after zkr resumed; expected at once",
        resumed.elapsed()
    );
    assert_eq!(
        a.wait(Duration::from_secs(5)),
        76,
        "stderr:\n{}",
        a.stderr()
    );
    assert!(a.stderr().contains("paused"), "stderr:\n{}", a.stderr());
    drop(server);
}

#[test]
fn logs_follow_rust_log_and_zkr_log_without_colours_off_a_terminal() {
    let path = format!("{}/x", unique_root("zkr-logs"));
    let holders = |env: &[(&str, &str)]| {
        let mut c = zkr(&direct(), &["holders", &path]);
        c.env_remove("RUST_LOG").env_remove("ZKR_LOG");
        for (k, v) in env {
            c.env(k, v);
        }
        run(&format!("zkr holders {env:?}"), c, Duration::from_secs(10))
    };
    // RUST_LOG=debug shows the library's debug logs, without ANSI colours on a pipe
    let debug = holders(&[("RUST_LOG", "debug")]);
    assert_eq!(debug.code, 0, "stderr:\n{}", debug.stderr);
    assert!(debug.stderr.contains("DEBUG"), "stderr:\n{}", debug.stderr);
    assert!(
        !debug.stderr.contains('\x1b'),
        "ANSI escapes on a pipe:\n{:?}",
        debug.stderr
    );
    // ZKR_LOG wins over RUST_LOG
    let quiet = holders(&[("RUST_LOG", "debug"), ("ZKR_LOG", "error")]);
    assert!(!quiet.stderr.contains("DEBUG"), "stderr:\n{}", quiet.stderr);
    // By default: no debug or info lines
    let default = holders(&[]);
    assert!(
        !default.stderr.contains("DEBUG") && !default.stderr.contains("INFO"),
        "stderr:\n{}",
        default.stderr
    );
}

#[test]
fn a_dropped_connection_while_cmd_runs_is_a_warning_by_default() {
    let path = format!("{}/job", unique_root("zkr-warn"));
    let (_dir, log) = log_file();
    let proxy = FaultProxy::start(shared_server().addr()).expect("proxy");
    let script = format!(r#"echo start >> "$LOG"; {LOOP}"#);
    let mut c = zkr(
        &proxy.addr().to_string(),
        &["lock", &path, "--", "sh", "-c", &script],
    );
    c.env("LOG", &log)
        .env_remove("RUST_LOG")
        .env_remove("ZKR_LOG");
    let mut a = Proc::spawn("zkr lock (via proxy)", c);
    wait_for_line(&log, "start", Duration::from_secs(10));
    // When the connection drops once (the client reconnects at once, same session)
    proxy.drop_connections();
    // Then zkr says so at the default log level, and keeps the lock
    let deadline = Instant::now() + Duration::from_secs(5);
    while !(a.stderr().contains("dropped") && a.stderr().contains("reconnected")) {
        assert!(
            Instant::now() < deadline,
            "expected warnings about the dropped connection and the reconnect, stderr:\n{}",
            a.stderr()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(a.stderr().contains("WARN"), "stderr:\n{}", a.stderr());
    assert!(a.try_status().is_none(), "stderr:\n{}", a.stderr());
    a.signal(Signal::SIGTERM);
    assert_eq!(a.wait(Duration::from_secs(5)), 128 + Signal::SIGTERM as i32);
}

#[test]
fn the_waiting_line_off_a_terminal_is_printed_again_when_the_place_changes() {
    let path = format!("{}/job", unique_root("zkr-reprint"));
    let (_dir, log) = log_file();
    // Given A holding until told, then B waiting, then C waiting behind both
    let hold = |who: &str| {
        format!(
            r#"echo "{who}" >> "$LOG"; i=0; while [ ! -e "$LOG.{who}" ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done"#
        )
    };
    let spawn = |who: &str| {
        let mut c = zkr(&direct(), &["lock", &path, "--", "sh", "-c", &hold(who)]);
        c.env("LOG", &log);
        Proc::spawn(who, c)
    };
    let mut a = spawn("A");
    wait_for_line(&log, "A", Duration::from_secs(10));
    let mut b = spawn("B");
    wait_for_children(&path, 2, Duration::from_secs(10));
    let mut c = spawn("C");
    wait_for_children(&path, 3, Duration::from_secs(10));
    let deadline = Instant::now() + Duration::from_secs(5);
    while !c.stderr().contains("2 ahead") {
        assert!(Instant::now() < deadline, "stderr of C:\n{}", c.stderr());
        std::thread::sleep(Duration::from_millis(20));
    }
    // When A finishes
    std::fs::write(format!("{}.A", log.display()), "").unwrap();
    assert_eq!(a.wait(Duration::from_secs(5)), 0);
    // Then C's log says it moved up (within the reprint limit of a few seconds)
    let deadline = Instant::now() + Duration::from_secs(10);
    while !c.stderr().contains("1 ahead") {
        assert!(
            Instant::now() < deadline,
            "expected a second waiting line with 1 ahead, stderr of C:\n{}",
            c.stderr()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let lines = c
        .stderr()
        .lines()
        .filter(|l| l.contains("waiting for"))
        .count();
    assert_eq!(lines, 2, "stderr of C:\n{}", c.stderr());
    std::fs::write(format!("{}.B", log.display()), "").unwrap();
    std::fs::write(format!("{}.C", log.display()), "").unwrap();
    assert_eq!(b.wait(Duration::from_secs(5)), 0);
    assert_eq!(c.wait(Duration::from_secs(5)), 0);
}

// ------------------------------------------------------------------------------------------
// The README's systemd unit: the stop path
// ------------------------------------------------------------------------------------------

#[test]
fn a_systemd_stop_sends_sigterm_through_and_exits_0_or_143() {
    let path = format!("{}/mailer", unique_root("zkr-systemd"));
    let (_dir, log) = log_file();
    // Given the unit's command: a leader whose daemon exits 0 on SIGTERM
    let script = format!(
        r#"trap 'echo "TERM $ZK_LEADER_ID" >> "$LOG"; exit 0' TERM; echo "lead $ZK_LEADER_ID" >> "$LOG"; {LOOP}"#
    );
    let spawn = |id: &str, script: &str| {
        let mut c = zkr(
            &direct(),
            &[
                "elect", &path, "--id", id, "--grace", "2s", "--", "sh", "-c", script,
            ],
        );
        c.env("LOG", &log);
        Proc::spawn(&format!("zkr elect {id}"), c)
    };
    let mut a = spawn("host-a", &script);
    wait_for_line(&log, "lead host-a", Duration::from_secs(10));
    // When systemd stops the unit (KillMode=mixed: SIGTERM to zkr only)
    a.signal(Signal::SIGTERM);
    // Then the daemon got SIGTERM, zkr resigned and exited 0: a clean stop
    assert_eq!(a.wait(Duration::from_secs(5)), 0, "stderr:\n{}", a.stderr());
    wait_for_line(&log, "TERM host-a", Duration::from_secs(1));
    assert_eq!(children(&path), Vec::<String>::new(), "did not resign");

    // Given a daemon that does not handle SIGTERM
    let plain = format!(r#"echo "lead $ZK_LEADER_ID" >> "$LOG"; {LOOP}"#);
    let mut b = spawn("host-b", &plain);
    wait_for_line(&log, "lead host-b", Duration::from_secs(10));
    // When the unit is stopped
    b.signal(Signal::SIGTERM);
    // Then zkr exits 143, what SuccessExitStatus=143 in the README's unit accepts
    assert_eq!(
        b.wait(Duration::from_secs(5)),
        128 + Signal::SIGTERM as i32,
        "stderr:\n{}",
        b.stderr()
    );
    assert_eq!(children(&path), Vec::<String>::new(), "did not resign");
}

// ------------------------------------------------------------------------------------------
// Secured ensembles: digest auth and ACLs, TLS
// ------------------------------------------------------------------------------------------

#[test]
fn digest_auth_from_the_option_the_environment_or_a_file_and_creator_acls() {
    let root = unique_root("zkr-digest");
    let prot = format!("{root}/prot");
    // Given a path only alice may use
    with_client({
        let (root, prot) = (root.clone(), prot.clone());
        move |c| {
            Box::pin(async move {
                c.auth("digest", b"alice:secret")
                    .await
                    .expect("digest auth");
                let open = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
                c.create(&root, b"", &open).await.expect("create root");
                let mine = zk::CreateMode::Persistent.with_acls(zk::Acls::creator_all());
                c.create(&prot, b"", &mine).await.expect("create prot");
            })
        }
    });
    let job = format!("{prot}/job");
    let (dir, _log) = log_file();
    let auth_file = dir.path().join("zk-auth");
    std::fs::write(&auth_file, "digest:alice:secret\n").unwrap();

    // When zkr has no credentials, or wrong ones: exit 1, saying what to give
    for (what, extra) in [
        ("no --auth", vec![]),
        ("a wrong password", vec!["--auth", "digest:alice:wrong"]),
    ] {
        let mut args = extra.clone();
        args.extend(["lock", job.as_str(), "--", "true"]);
        let mut c = zkr(&direct(), &args);
        c.env_remove("ZK_AUTH");
        let out = run(what, c, Duration::from_secs(10));
        assert_eq!(out.code, 1, "{what}: stderr:\n{}", out.stderr);
        assert!(
            out.stderr.contains("no permission") && out.stderr.contains("--auth"),
            "{what}: stderr:\n{}",
            out.stderr
        );
    }
    // When alice's credentials come from --auth, ZK_AUTH or --auth-file: it runs
    let auth_file = auth_file.to_str().unwrap();
    for (what, extra, env) in [
        ("--auth", vec!["--auth", "digest:alice:secret"], None),
        ("ZK_AUTH", vec![], Some("digest:alice:secret")),
        // The file wins over ZK_AUTH.
        (
            "--auth-file",
            vec!["--auth-file", auth_file],
            Some("digest:bob:pw"),
        ),
    ] {
        let mut args = extra.clone();
        args.extend(["lock", job.as_str(), "--", "true"]);
        let mut c = zkr(&direct(), &args);
        c.env_remove("ZK_AUTH");
        if let Some(v) = env {
            c.env("ZK_AUTH", v);
        }
        let out = run(what, c, Duration::from_secs(10));
        assert_eq!(out.code, 0, "{what}: stderr:\n{}", out.stderr);
    }

    // Given bob holding a lock whose nodes zkr creates with --acl creator
    let bobs = format!("{root}/bob/job");
    let (_dir2, log) = log_file();
    let mut c = zkr(
        &direct(),
        &[
            "--auth",
            "digest:bob:pw",
            "--acl",
            "creator",
            "lock",
            &bobs,
            "--",
            "sh",
            "-c",
            &format!(r#"echo start >> "$LOG"; {LOOP}"#),
        ],
    );
    c.env("LOG", &log);
    let mut bob = Proc::spawn("zkr --acl creator", c);
    wait_for_line(&log, "start", Duration::from_secs(10));
    // Then the nodes belong to bob alone
    let acl = with_client({
        let bobs = bobs.clone();
        move |c| {
            Box::pin(async move {
                // Reading an ACL needs READ or ADMIN: only bob has them.
                c.auth("digest", b"bob:pw").await.expect("digest auth");
                c.get_acl(&bobs).await
            })
        }
    })
    .expect("get_acl of the lock directory, as bob");
    // (`creator` also names the session's private identity, which only that zkr knows: it
    // is what lets the holder alone write its nodes.)
    assert!(
        acl.0.iter().all(|a| a.scheme() == "digest"
            && (a.id().starts_with("bob:") || a.id().starts_with("zk-recipes-")))
            && acl
                .0
                .iter()
                .any(|a| a.id().starts_with("bob:") && a.permission() == zk::Permission::ALL),
        "expected bob's digest (and the session's private one) in the ACL, got {:?}",
        acl.0
    );
    // And someone else cannot queue for it
    let out = run(
        "zkr lock (not bob)",
        zkr(&direct(), &["lock", "--try", &bobs, "--", "true"]),
        Duration::from_secs(10),
    );
    assert_eq!(out.code, 1, "stderr:\n{}", out.stderr);
    assert!(
        out.stderr.contains("no permission"),
        "stderr:\n{}",
        out.stderr
    );
    bob.signal(Signal::SIGTERM);
    assert_eq!(
        bob.wait(Duration::from_secs(5)),
        128 + Signal::SIGTERM as i32
    );

    // --acl creator without credentials is a usage error
    let mut c = zkr(&direct(), &["--acl", "creator", "lock", &job, "--", "true"]);
    c.env_remove("ZK_AUTH");
    let out = run("--acl creator without --auth", c, Duration::from_secs(10));
    assert_eq!(out.code, 2, "stderr:\n{}", out.stderr);
    assert!(out.stderr.contains("--auth"), "stderr:\n{}", out.stderr);
}

/// `keytool` of the JDK that runs the servers.
#[cfg(feature = "tls")]
fn keytool(args: &[&str]) {
    let out = Command::new("keytool")
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("keytool: {e}; TLS tests need the JDK's keytool"));
    assert!(
        out.status.success(),
        "keytool {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `openssl req -x509`: a throwaway self-signed certificate and key for 127.0.0.1, as PEM
/// files `dir/NAME.pem` and `dir/NAME.key`.
#[cfg(feature = "tls")]
fn self_signed_pem(dir: &Path, name: &str) -> (PathBuf, PathBuf) {
    let (cert, key) = (
        dir.join(format!("{name}.pem")),
        dir.join(format!("{name}.key")),
    );
    let out = Command::new("openssl")
        .args([
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
        ])
        .args(["-subj", &format!("/CN={name}")])
        .args(["-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"])
        // An end-entity certificate that is its own trust anchor (rustls refuses a CA
        // certificate as a server's).
        .args(["-addext", "basicConstraints=critical,CA:FALSE"])
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .output()
        .unwrap_or_else(|e| panic!("openssl: {e}; TLS tests need openssl"));
    assert!(
        out.status.success(),
        "openssl req failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    (cert, key)
}

#[cfg(feature = "tls")]
#[test]
fn tls_with_the_servers_ca_and_a_client_certificate() {
    use zk_recipes::testing::{ServerOptions, ZooKeeperServer};

    // Given a server with a TLS client port that requires client certificates
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (server_pem, server_key) = self_signed_pem(d, "server");
    let (client_pem, client_key) = self_signed_pem(d, "client");
    let out = Command::new("openssl")
        .args(["pkcs12", "-export", "-passout", "pass:secret123"])
        .arg("-in")
        .arg(&server_pem)
        .arg("-inkey")
        .arg(&server_key)
        .arg("-out")
        .arg(d.join("server.p12"))
        .output()
        .expect("openssl pkcs12");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let trust = d.join("trust.p12");
    for (alias, pem) in [("server", &server_pem), ("client", &client_pem)] {
        keytool(&[
            "-importcert",
            "-noprompt",
            "-alias",
            alias,
            "-file",
            pem.to_str().unwrap(),
            "-keystore",
            trust.to_str().unwrap(),
            "-storepass",
            "secret123",
            "-storetype",
            "PKCS12",
        ]);
    }
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let ssl = |k: &str| format!("zookeeper.ssl.{k}");
    let server = ZooKeeperServer::start_with(
        ServerOptions::new()
            .with_config_line(format!("secureClientPort={port}"))
            .with_system_property(
                "zookeeper.serverCnxnFactory",
                "org.apache.zookeeper.server.NettyServerCnxnFactory",
            )
            .with_system_property(
                ssl("keyStore.location"),
                d.join("server.p12").to_str().unwrap(),
            )
            .with_system_property(ssl("keyStore.password"), "secret123")
            .with_system_property(ssl("keyStore.type"), "PKCS12")
            .with_system_property(ssl("trustStore.location"), trust.to_str().unwrap())
            .with_system_property(ssl("trustStore.password"), "secret123")
            .with_system_property(ssl("trustStore.type"), "PKCS12")
            .with_system_property(ssl("clientAuth"), "need"),
    )
    .expect("a ZooKeeper server with a TLS client port");
    let secure = format!("127.0.0.1:{port}");
    let path = format!("{}/job", unique_root("zkr-tls"));
    let file = |p: &PathBuf| p.to_str().unwrap().to_string();

    // When zkr connects with the server's CA and its client certificate: it runs
    let with_cert = [
        "--tls-ca".to_string(),
        file(&server_pem),
        "--tls-cert".to_string(),
        file(&client_pem),
        "--tls-key".to_string(),
        file(&client_key),
    ];
    let mut args: Vec<&str> = with_cert.iter().map(String::as_str).collect();
    args.extend(["lock", &path, "--", "sh", "-c", "echo ran-over-tls"]);
    let out = run("zkr over TLS", zkr(&secure, &args), Duration::from_secs(20));
    let server_log = || {
        let log = std::fs::read_to_string(server.log_path()).unwrap_or_default();
        let tail: Vec<&str> = log.lines().rev().take(30).collect();
        tail.into_iter().rev().collect::<Vec<_>>().join("\n")
    };
    assert_eq!(
        out.code,
        0,
        "stderr:\n{}\nserver log:\n{}",
        out.stderr,
        server_log()
    );
    assert_eq!(out.stdout, "ran-over-tls\n");

    // When it leaves out the client certificate, or TLS altogether: unreachable (69)
    let ca_only = ["--tls-ca", server_pem.to_str().unwrap()];
    for (what, extra) in [("no client certificate", &ca_only[..]), ("no TLS", &[][..])] {
        let mut args = extra.to_vec();
        args.extend(["lock", &path, "--", "true"]);
        let out = run(what, zkr(&secure, &args), Duration::from_secs(20));
        assert_eq!(out.code, 69, "{what}: stderr:\n{}", out.stderr);
        assert!(
            out.stderr.contains("accepts connections"),
            "{what}: stderr:\n{}",
            out.stderr
        );
    }
    // And a CA file that is not PEM is a usage error
    let out = run(
        "a bad CA file",
        zkr(
            &secure,
            &["--tls-ca", client_key.to_str().unwrap(), "holders", "/x"],
        ),
        Duration::from_secs(10),
    );
    assert_eq!(out.code, 2, "stderr:\n{}", out.stderr);
    drop(server);
}

#[cfg(not(feature = "tls"))]
#[test]
fn tls_options_without_the_tls_feature_are_a_usage_error() {
    let out = run(
        "--tls-ca without the feature",
        zkr(
            &direct(),
            &["--tls-ca", "/nonexistent.pem", "holders", "/x"],
        ),
        Duration::from_secs(10),
    );
    assert_eq!(out.code, 2, "stderr:\n{}", out.stderr);
    assert!(
        out.stderr.contains("--features tls"),
        "stderr:\n{}",
        out.stderr
    );
}

/// One path, one kind: beside two `--permits 2` holders, a `--permits 3` lock, a plain lock, a
/// reader and an election are refused at once with exit 2 and a message naming what holds the
/// path; nothing of theirs runs and the holders carry on.
#[test]
fn a_path_held_by_another_kind_is_refused_with_exit_2() {
    let path = format!("{}/slots", unique_root("zkr-kind"));
    let (_dir, log) = log_file();
    let mut holders: Vec<Proc> = (0..2)
        .map(|i| {
            Proc::spawn(
                &format!("holder {i}"),
                zkr(
                    &direct(),
                    &["lock", "--permits", "2", &path, "--", "sleep", "30"],
                ),
            )
        })
        .collect();
    wait_for_children(&path, 2, Duration::from_secs(20));
    let ran = format!("echo ran >> {}", sh_quote(&log.to_string_lossy()));
    for (what, args) in [
        ("--permits 3", vec!["lock", "--permits", "3"]),
        ("a plain lock", vec!["lock"]),
        ("a reader", vec!["read"]),
        ("an election", vec!["elect", "--id", "x"]),
    ] {
        let mut a: Vec<&str> = args.clone();
        a.extend([path.as_str(), "--", "sh", "-c", ran.as_str()]);
        let done = run(what, zkr(&direct(), &a), Duration::from_secs(20));
        assert_eq!(done.code, 2, "{what}: stderr:\n{}", done.stderr);
        assert!(
            done.stderr.contains("in use by") && done.stderr.contains("semaphore"),
            "{what}: the message should name what holds the path:\n{}",
            done.stderr
        );
        assert!(done.took < Duration::from_secs(10), "{what} waited");
    }
    assert!(read_lines(&log).is_empty(), "a refused CMD ran");
    assert_eq!(children(&path).len(), 2, "{:?}", children(&path));
    for h in &mut holders {
        assert!(h.try_status().is_none(), "a holder stopped: {}", h.stderr());
    }
}

// ------------------------------------------------------------------------------------------
// --metrics-addr
// ------------------------------------------------------------------------------------------

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// `GET /` on `127.0.0.1:port`: the Prometheus text body, or an error (not listening yet).
fn scrape(port: u16) -> Result<String, String> {
    use std::io::Write;
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let mut conn = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(1))
        .map_err(|e| e.to_string())?;
    conn.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    write!(
        conn,
        "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    )
    .map_err(|e| e.to_string())?;
    let mut reply = String::new();
    conn.read_to_string(&mut reply).map_err(|e| e.to_string())?;
    match reply.split_once("\r\n\r\n") {
        Some((head, body)) if head.starts_with("HTTP/1.1 200") => Ok(body.to_string()),
        _ => Err(format!("not a 200 reply: {reply:?}")),
    }
}

/// The value of the sample `name{labels}` (labels exactly as the exporter prints them, in
/// its order), or `None` when the series is absent.
fn sample(body: &str, series: &str) -> Option<f64> {
    body.lines().filter(|l| !l.starts_with('#')).find_map(|l| {
        l.strip_prefix(series)?
            .strip_prefix(' ')?
            .trim()
            .parse()
            .ok()
    })
}

/// Scrapes until `ok` holds for the body, panicking with the last body after `within`.
fn scrape_until(port: u16, within: Duration, what: &str, ok: impl Fn(&str) -> bool) -> String {
    let deadline = Instant::now() + within;
    loop {
        let got = scrape(port);
        if let Ok(body) = &got {
            if ok(body) {
                return body.clone();
            }
        }
        if Instant::now() >= deadline {
            panic!("expected {what} within {within:?}; last scrape: {got:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn metrics_addr_serves_the_library_counters_while_zkr_lock_waits_and_holds() {
    let path = format!("{}/job", unique_root("zkr-metrics"));
    let (_dir, log) = log_file();
    // Given a holder, and a second zkr with --metrics-addr queued behind it
    let script = |who: &str| format!(r#"echo "{who}" >> "$LOG"; {LOOP}"#);
    let mut c = zkr(
        &direct(),
        &["lock", &path, "--", "sh", "-c", &script("first")],
    );
    c.env("LOG", &log);
    let mut first = Proc::spawn("first holder", c);
    wait_for_line(&log, "first", Duration::from_secs(10));
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let mut c = zkr(
        &direct(),
        &[
            "--metrics-addr",
            &addr,
            "lock",
            &path,
            "--",
            "sh",
            "-c",
            &script("second"),
        ],
    );
    c.env("LOG", &log);
    let mut second = Proc::spawn("second (metrics)", c);
    wait_for_children(&path, 2, Duration::from_secs(10));

    // Then while it waits, its endpoint shows the session and its requests, and no acquire
    let waiting = scrape_until(port, Duration::from_secs(10), "a connected session", |b| {
        sample(b, r#"zk_recipes_session_events_total{state="connected"}"#) == Some(1.0)
    });
    let requests_waiting = sample(&waiting, r#"zk_recipes_requests_total{op="create"}"#);
    assert!(
        requests_waiting.is_some_and(|n| n >= 1.0),
        "the queue node's create is counted:\n{waiting}"
    );
    assert_eq!(
        sample(
            &waiting,
            r#"zk_recipes_acquires_total{kind="lock",outcome="granted"}"#
        ),
        None,
        "nothing granted yet:\n{waiting}"
    );

    // When the first holder lets go
    first.signal(Signal::SIGTERM);
    first.wait(Duration::from_secs(5));
    wait_for_line(&log, "second", Duration::from_secs(10));
    // Then the counters move: one grant, after a hand-off (a notification: no request)
    let holding = scrape_until(port, Duration::from_secs(10), "a granted acquire", |b| {
        sample(
            b,
            r#"zk_recipes_acquires_total{kind="lock",outcome="granted"}"#,
        ) == Some(1.0)
    });
    assert_eq!(
        sample(&holding, r#"zk_recipes_handoffs_total{kind="lock"}"#),
        Some(1.0),
        "the grant came after waiting behind the first holder:\n{holding}"
    );
    assert!(
        holding.contains("zk_recipes_acquire_seconds"),
        "the acquire wait is timed:\n{holding}"
    );

    // And it stops serving when zkr exits
    second.signal(Signal::SIGTERM);
    second.wait(Duration::from_secs(5));
    assert!(scrape(port).is_err(), "still serving after zkr exited");
}

#[test]
fn metrics_addr_in_use_is_an_error_before_connecting() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    // A ZooKeeper that does not exist: zkr must fail on the address before trying it.
    let out = run(
        "zkr --metrics-addr (taken)",
        zkr("127.0.0.1:1", &["--metrics-addr", &addr, "holders", "/x"]),
        Duration::from_secs(10),
    );
    assert_eq!(out.code, 1, "stderr:\n{}", out.stderr);
    assert!(
        out.stderr.contains("--metrics-addr") && out.stderr.contains(&addr),
        "stderr:\n{}",
        out.stderr
    );
    let out = run(
        "zkr --metrics-addr nonsense",
        zkr(
            "127.0.0.1:1",
            &["--metrics-addr", "nonsense", "holders", "/x"],
        ),
        Duration::from_secs(10),
    );
    assert_eq!(out.code, 2, "a usage error; stderr:\n{}", out.stderr);
}

/// Given `zkr lock /a /b -- CMD` (the default 10 s session timeout, as a user runs it), when an
/// administrator deletes `/a`'s node, then zkr stops CMD and exits 76, and `/b` is free at
/// once: a `zkr lock --try` on it half a second later gets it. zkr used to exit without
/// closing its session ("after a loss there is nothing left to release"), and `/b` stayed
/// taken by a `zkr` that had exited, for the session timeout (10.1 s; found by a review,
/// 2026-11-27).
#[test]
fn a_multi_lock_that_loses_one_lock_frees_the_others_when_zkr_exits() {
    let root = unique_root("zkr-multi-lost");
    let (a_path, b_path) = (format!("{root}/a"), format!("{root}/b"));
    let (_dir, log) = log_file();
    let script = format!(r#"echo "nodes $(echo $ZK_LOCK_NODES | tr '\n' ' ')" >> "$LOG"; {LOOP}"#);
    let mut c = Command::new(ZKR);
    c.env_remove("ZK_CONNECT")
        .args(["--connect", &direct()])
        .args([
            "lock", "--grace", "200ms", &a_path, &b_path, "--", "sh", "-c", &script,
        ]);
    c.env("LOG", &log);
    let mut p = Proc::spawn("zkr lock a b", c);
    let nodes = wait_for_line(&log, "nodes ", Duration::from_secs(10));
    let a_node = nodes["nodes ".len()..]
        .split_whitespace()
        .next()
        .unwrap()
        .to_string();
    assert!(a_node.starts_with(&a_path), "{nodes}");
    with_client({
        let n = a_node.clone();
        move |c| Box::pin(async move { c.delete(&n, None).await })
    })
    .unwrap();
    assert_eq!(
        p.wait(Duration::from_secs(5)),
        76,
        "stderr:\n{}",
        p.stderr()
    );
    std::thread::sleep(Duration::from_millis(500));
    let left_b = children(&b_path);
    let second = run(
        "zkr lock --try b",
        zkr(&direct(), &["lock", "--try", &b_path, "--", "true"]),
        Duration::from_secs(10),
    );
    assert!(
        left_b.is_empty() && second.code == 0,
        "zkr exited 76, and 0.5 s later {b_path} still holds {left_b:?}; `zkr lock --try` on it exited {} ({})",
        second.code,
        second.stderr.trim()
    );
}

/// The processes of `zkr`'s tree: `zkr` itself and its descendants, with their names
/// (`/proc/PID/comm`, what `pkill` and `killall` match).
fn tree_of(root: i32) -> Vec<(i32, String)> {
    let mut all = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let name = e.file_name().into_string().unwrap_or_default();
        if !name.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{name}/stat")) else {
            continue;
        };
        let Some(rest) = stat.rfind(')').map(|i| &stat[i + 1..]) else {
            continue;
        };
        let ppid: i32 = rest
            .split_whitespace()
            .nth(1)
            .and_then(|p| p.parse().ok())
            .unwrap_or(0);
        let comm = std::fs::read_to_string(format!("/proc/{name}/comm")).unwrap_or_default();
        all.push((name.parse::<i32>().unwrap(), ppid, comm.trim().to_string()));
    }
    let mut tree = vec![(root, String::new())];
    let mut i = 0;
    while i < tree.len() {
        let parent = tree[i].0;
        for (pid, ppid, comm) in &all {
            if *ppid == parent {
                tree.push((*pid, comm.clone()));
            }
        }
        i += 1;
    }
    tree[0].1 = all
        .iter()
        .find(|(pid, ..)| *pid == root)
        .map(|(.., comm)| comm.clone())
        .unwrap_or_default();
    tree
}

/// A CMD that starts a child in its own process group and one that leaves the group
/// (`setsid`), and logs their pids.
fn escaping_script() -> String {
    format!(
        r#"echo "cmd $$" >> "$LOG"
sh -c '{LOOP}' & echo "child $!" >> "$LOG"
setsid sh -c '{LOOP}' & echo "escaped $!" >> "$LOG"
echo ready >> "$LOG"; wait"#
    )
}

/// `zkr lock PATH -- CMD` with CMD of [`escaping_script`], once CMD's processes run: the
/// log's guard, zkr, and the pids of CMD, its child and its escaped child.
fn start_escaping(path: &str) -> (tempfile::TempDir, Proc, Vec<(&'static str, i32)>) {
    let (dir, log) = log_file();
    let mut c = zkr(
        &direct(),
        &["lock", path, "--", "sh", "-c", &escaping_script()],
    );
    c.env("LOG", &log);
    let a = Proc::spawn("zkr lock", c);
    wait_for_line(&log, "ready", Duration::from_secs(10));
    let pids = ["cmd", "child", "escaped"]
        .into_iter()
        .map(|n| (n, pid_of(&log, n)))
        .collect();
    (dir, a, pids)
}

/// Which processes of zkr's tree are killed in [`killed_case`].
#[derive(Debug, Clone, Copy)]
enum Killed {
    /// The supervisor alone (the OOM killer's pick, an operator's `kill -9 PID`).
    Supervisor,
    /// Every process named `zkr`, as `pkill -9 -x zkr` or `killall -9 zkr` does.
    ByName,
}

/// Given `zkr lock P -- CMD` where CMD starts a child in its group and one out of it
/// (`setsid`), when `killed` processes of zkr's tree get SIGKILL, then no process of CMD's
/// runs once the lock is free. The supervisor killed alone (found by a review, 2026-11-27)
/// left the escaped child re-parented to init, still running after zkr had released the
/// lock and exited: `zkr` is now a child subreaper too, and stops what comes to it. Killing
/// by name passed before as well (the supervisor, run as `/proc/self/exe`, was named `exe`);
/// it keeps the supervisor out of a `pkill zkr` now that it has a name of its own.
fn killed_case(killed: Killed) {
    let path = format!("{}/job", unique_root("zkr-killed-tree"));
    let (_dir, mut a, pids) = start_escaping(&path);
    let tree = tree_of(a.pid());
    let targets: Vec<i32> = match killed {
        Killed::Supervisor => tree
            .iter()
            .skip(1)
            .filter(|(pid, _)| {
                std::fs::read_to_string(format!("/proc/{pid}/cmdline"))
                    .unwrap_or_default()
                    .contains("__supervise")
            })
            .map(|(pid, _)| *pid)
            .collect(),
        Killed::ByName => tree
            .iter()
            .filter(|(_, comm)| comm == "zkr")
            .map(|(pid, _)| *pid)
            .collect(),
    };
    assert!(
        !targets.is_empty(),
        "{killed:?}: nothing to kill in {tree:?}"
    );
    for pid in &targets {
        let _ = kill(Pid::from_raw(*pid), Signal::SIGKILL);
    }
    let _ = a.wait(Duration::from_secs(10));
    // The lock is free once zkr is gone (closed, or expired with the 2 s session).
    let deadline = Instant::now() + Duration::from_secs(6);
    while !children(&path).is_empty() {
        assert!(
            Instant::now() < deadline,
            "{killed:?}: the lock was never freed"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let alive: Vec<_> = pids
        .iter()
        .copied()
        .filter(|(_, pid)| running(*pid))
        .collect();
    for (_, pid) in &pids {
        let _ = kill(Pid::from_raw(*pid), Signal::SIGKILL);
    }
    assert!(
        alive.is_empty(),
        "{killed:?} (killed {targets:?} of {tree:?}): the lock is free while CMD's processes still run: {alive:?}\nstderr:\n{}",
        a.stderr()
    );
}

#[test]
fn a_killed_supervisor_leaves_nothing_of_cmd_running_once_the_lock_is_free() {
    killed_case(Killed::Supervisor);
}

#[test]
fn killing_zkr_by_name_leaves_nothing_of_cmd_running_once_the_lock_is_free() {
    killed_case(Killed::ByName);
}

/// Given `zkr --lost-exit-code 101 elect P -- CMD`, when an administrator deletes the
/// leader's node, then zkr exits 101 and says so: its message said "exiting 76" whatever the
/// status (found by a review, 2026-11-27).
#[test]
fn a_renumbered_lost_status_is_the_one_the_message_names() {
    let path = format!("{}/svc", unique_root("zkr-lost-msg"));
    let (_dir, log) = log_file();
    let script = format!(r#"echo "node $ZK_LOCK_NODE" >> "$LOG"; {LOOP}"#);
    let mut c = zkr(
        &direct(),
        &[
            "--lost-exit-code",
            "101",
            "elect",
            "--grace",
            "500ms",
            &path,
            "--id",
            "alpha",
            "--",
            "sh",
            "-c",
            &script,
        ],
    );
    c.env("LOG", &log);
    let mut a = Proc::spawn("zkr elect", c);
    let node = wait_for_line(&log, "node ", Duration::from_secs(10))["node ".len()..].to_string();
    with_client(move |c| Box::pin(async move { c.delete(&node, None).await })).unwrap();
    assert_eq!(
        a.wait(Duration::from_secs(10)),
        101,
        "stderr:\n{}",
        a.stderr()
    );
    let err = a.stderr();
    assert!(
        err.contains("exiting 101") && !err.contains("exiting 76"),
        "zkr exited 101; its stderr:\n{err}"
    );
}
