//! Run Apache Curator and kazoo peers (`tests/interop/`) and collect their histories.
//!
//! * Curator: `tests/interop/Interop.java`, compiled once per source version into
//!   `<target>/interop-java/<hash>/` against Debian's jars in /usr/share/java.
//! * kazoo: `tests/interop/kazoo_interop.py`. Plain locks run under Debian's `/usr/bin/python3`
//!   (python3-kazoo 2.8). ReadLock/WriteLock run under a virtualenv `<target>/interop-venv` with
//!   PyPI `kazoo>=2.9` (Debian's 2.8 deadlocks when readers and writers mix: python-zk/kazoo#649).
//!
//! Missing tools are test FAILURES (panics naming the package to install), never silent skips.
//!
//! Protocol of both peers (one line per event on stdout, see `Interop.java`):
//! `READY`, `REQ <ns> <kind> <id>`, `ACQ <ns> <kind> <id> <node|->`, `REL <ns> <kind> <id> [lost]`,
//! `ERR <msg>`, `DONE`; parsed by [`super::history::parse_interop_line`].
//!
//! Node naming matters for interop (verified against ZooKeeper 3.8.0, Curator 5.4.0, kazoo 2.8/2.11):
//! Curator sorts ALL children of the lock path by the text after its lock name (`lock-`, `__READ__`,
//! `__WRIT__`, `latch-`), and a child without that name sorts by its whole name. kazoo's default
//! `<32hex>__lock__<seq>` nodes therefore sort after every Curator node and Curator ignores them:
//! Curator + default kazoo on one path OVERLAP. Pass `--names=curator` to kazoo_interop.py to
//! make kazoo create `<32hex>-lock-<seq>` / `__READ__` / `__WRIT__` nodes that both sides order.
#![allow(dead_code)]

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use super::history::{monotonic_ns, Event, InteropLine, LineCollector};

/// Debian package hint printed when a tool is missing.
pub const APT_HINT: &str =
    "apt-get update && apt-get install -y default-jdk-headless zookeeper libcurator-recipes-java libslf4j-java python3-kazoo python3-venv";

const JAVA_DIR: &str = "/usr/share/java";

/// Client-side jars for Interop.java (Curator 5.4 + ZooKeeper 3.8 client).
pub const CLIENT_JARS: &[&str] = &[
    "curator-recipes.jar",
    "curator-framework.jar",
    "curator-client.jar",
    "zookeeper.jar",
    "zookeeper-jute.jar",
    "guava.jar",
    "slf4j-api.jar",
    "slf4j-nop.jar",
    "netty-all.jar",
];

/// The workspace root (the `zk-recipes` package), where `tests/interop/` is, also when these
/// helpers are compiled into another package's tests (`zkr/tests/zkr.rs`).
pub fn manifest_dir() -> PathBuf {
    let package = Path::new(env!("CARGO_MANIFEST_DIR"));
    package
        .ancestors()
        .find(|dir| dir.join("tests/interop/Interop.java").is_file())
        .unwrap_or(package)
        .to_path_buf()
}

/// `$CARGO_TARGET_DIR` (relative paths are relative to the workspace) or `<workspace>/target`.
pub fn target_dir() -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(d) if !d.is_empty() => {
            let d = PathBuf::from(d);
            if d.is_absolute() {
                d
            } else {
                manifest_dir().join(d)
            }
        }
        _ => manifest_dir().join("target"),
    }
}

pub fn interop_dir() -> PathBuf {
    manifest_dir().join("tests").join("interop")
}

fn jar_classpath(jars: &[&str]) -> String {
    let mut missing = Vec::new();
    let mut cp = Vec::new();
    for j in jars {
        let p = Path::new(JAVA_DIR).join(j);
        if !p.is_file() {
            missing.push(p.display().to_string());
        }
        cp.push(p.display().to_string());
    }
    if !missing.is_empty() {
        panic!("interop: missing Java jars {missing:?}.\nInstall them with:\n  {APT_HINT}");
    }
    cp.join(":")
}

/// Classpath of Debian's Curator/ZooKeeper client jars (panics if any is missing).
pub fn client_classpath() -> String {
    jar_classpath(CLIENT_JARS)
}

fn require_tool(cmd: &str, arg: &str) {
    match Command::new(cmd).arg(arg).stdout(Stdio::null()).stderr(Stdio::null()).status() {
        Ok(s) if s.success() => {}
        other => panic!("interop: `{cmd} {arg}` failed ({other:?}); is a JDK installed?\nInstall with:\n  {APT_HINT}"),
    }
}

/// Compile `tests/interop/Interop.java` (once per process, reused across processes while the source
/// is unchanged) and return the directory holding `Interop.class`.
pub fn build_java() -> PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let src = interop_dir().join("Interop.java");
        let text = std::fs::read(&src)
            .unwrap_or_else(|e| panic!("interop: cannot read {}: {e}", src.display()));
        let cp = client_classpath();
        require_tool("javac", "-version");
        require_tool("java", "-version");
        let mut h = DefaultHasher::new();
        text.hash(&mut h);
        cp.hash(&mut h);
        let base = target_dir().join("interop-java");
        let dir = base.join(format!("{:016x}", h.finish()));
        if dir.join("Interop.class").is_file() {
            return dir;
        }
        std::fs::create_dir_all(&base)
            .unwrap_or_else(|e| panic!("interop: mkdir {}: {e}", base.display()));
        let tmp = base.join(format!("tmp-{}-{}", std::process::id(), monotonic_ns()));
        let out = Command::new("javac")
            .args(["-nowarn", "-Xlint:-path", "-encoding", "UTF-8", "-d"])
            .arg(&tmp)
            .arg("-cp")
            .arg(&cp)
            .arg(&src)
            .output()
            .unwrap_or_else(|e| {
                panic!("interop: cannot run javac: {e}\nInstall with:\n  {APT_HINT}")
            });
        if !out.status.success() {
            panic!(
                "interop: javac {} failed ({}):\n{}{}",
                src.display(),
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        // Another test process may have won the race; either way `dir` ends up complete.
        if std::fs::rename(&tmp, &dir).is_err() {
            let _ = std::fs::remove_dir_all(&tmp);
        }
        assert!(
            dir.join("Interop.class").is_file(),
            "interop: {} has no Interop.class",
            dir.display()
        );
        dir
    })
    .clone()
}

/// `java -cp <classes>:<jars> Interop ARGS...` (stdin/stdout piped, stderr inherited).
pub fn curator_command(args: &[&str]) -> Command {
    let classes = build_java();
    let mut c = Command::new("java");
    c.arg("-Xss512k")
        .arg("-XX:+UseSerialGC")
        .arg("-XX:TieredStopAtLevel=1")
        .arg("-cp")
        .arg(format!("{}:{}", classes.display(), client_classpath()))
        .arg("Interop")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    c
}

/// Start a Curator peer: `spawn_curator(&["mutex", &connect, "/l", "5", "20"])`.
pub fn spawn_curator(args: &[&str]) -> Child {
    curator_command(args)
        .spawn()
        .unwrap_or_else(|e| panic!("interop: cannot start java Interop {args:?}: {e}"))
}

fn python_kazoo_version(python: &Path) -> Option<String> {
    let out = Command::new(python)
        .args([
            "-c",
            "import kazoo.version; print(kazoo.version.__version__)",
        ])
        .stderr(Stdio::null())
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    Some(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn version_at_least(v: &str, major: u64, minor: u64) -> bool {
    let mut it = v.split('.').map(|p| {
        p.chars()
            .take_while(|c| c.is_ascii_digit())
            .collect::<String>()
            .parse::<u64>()
            .unwrap_or(0)
    });
    let (a, b) = (it.next().unwrap_or(0), it.next().unwrap_or(0));
    (a, b) >= (major, minor)
}

/// The Python interpreter for kazoo_interop.py.
///
/// * `rw == false`: Debian's `/usr/bin/python3` with python3-kazoo (2.8 is fine for `Lock`).
/// * `rw == true`: `<target>/interop-venv/bin/python` with PyPI `kazoo>=2.9`, created on first use
///   (`/usr/bin/python3 -m venv` + `pip install 'kazoo>=2.9'`; needs python3-venv and PyPI access).
pub fn kazoo_python(rw: bool) -> PathBuf {
    static PLAIN: OnceLock<PathBuf> = OnceLock::new();
    static RW: OnceLock<PathBuf> = OnceLock::new();
    let system = PathBuf::from("/usr/bin/python3");
    if !rw {
        return PLAIN
            .get_or_init(|| {
                if python_kazoo_version(&system).is_none() {
                    panic!("interop: `/usr/bin/python3 -c 'import kazoo'` failed.\nInstall with:\n  {APT_HINT}");
                }
                system
            })
            .clone();
    }
    RW.get_or_init(|| {
        let venv = target_dir().join("interop-venv");
        let py = venv.join("bin").join("python");
        if let Some(v) = python_kazoo_version(&py) {
            if version_at_least(&v, 2, 9) {
                return py;
            }
        }
        if !system.is_file() {
            panic!("interop: /usr/bin/python3 is missing.\nInstall with:\n  {APT_HINT}");
        }
        std::fs::create_dir_all(target_dir()).ok();
        let tmp = target_dir().join(format!("interop-venv.tmp-{}-{}", std::process::id(), monotonic_ns()));
        let run = |cmd: &mut Command, what: &str| {
            let out = cmd.output().unwrap_or_else(|e| panic!("interop: {what}: cannot run: {e}"));
            if !out.status.success() {
                let _ = std::fs::remove_dir_all(&tmp);
                panic!(
                    "interop: {what} failed ({}):\n{}{}\nThe kazoo read/write interop tests need a virtualenv with PyPI kazoo>=2.9 \
                     (Debian's python3-kazoo 2.8 deadlocks on mixed readers/writers, python-zk/kazoo#649).\n\
                     Needs python3-venv ({APT_HINT}) and access to PyPI; or create it yourself:\n  \
                     /usr/bin/python3 -m venv {} && {}/bin/pip install 'kazoo>=2.9'",
                    out.status,
                    String::from_utf8_lossy(&out.stdout),
                    String::from_utf8_lossy(&out.stderr),
                    venv.display(),
                    venv.display()
                );
            }
        };
        run(Command::new(&system).arg("-m").arg("venv").arg(&tmp), "python3 -m venv");
        run(
            Command::new(tmp.join("bin").join("python")).args(["-m", "pip", "install", "-q", "--disable-pip-version-check", "kazoo>=2.9"]),
            "pip install 'kazoo>=2.9'",
        );
        // A venv's interpreter finds its site-packages through <dir>/pyvenv.cfg, so it can be moved.
        if std::fs::rename(&tmp, &venv).is_err() {
            // lost a race with another test process (or a broken old venv is in the way)
            if python_kazoo_version(&py).is_some_and(|v| version_at_least(&v, 2, 9)) {
                let _ = std::fs::remove_dir_all(&tmp);
            } else {
                let _ = std::fs::remove_dir_all(&venv);
                std::fs::rename(&tmp, &venv).unwrap_or_else(|e| panic!("interop: cannot move venv into {}: {e}", venv.display()));
            }
        }
        match python_kazoo_version(&py) {
            Some(v) if version_at_least(&v, 2, 9) => py,
            other => panic!("interop: {} has kazoo {other:?}, expected >= 2.9", py.display()),
        }
    })
    .clone()
}

pub fn kazoo_script() -> PathBuf {
    interop_dir().join("kazoo_interop.py")
}

/// `PYTHON kazoo_interop.py ARGS...` (stdin/stdout piped, stderr inherited).
pub fn kazoo_command(python: &Path, args: &[&str]) -> Command {
    let mut c = Command::new(python);
    c.arg("-u")
        .arg(kazoo_script())
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    c
}

/// Start a kazoo peer. `read`/`write` modes run under the PyPI kazoo venv, everything else under
/// Debian's python3. Add `"--names=curator"` to make kazoo's nodes visible to Curator.
pub fn spawn_kazoo(args: &[&str]) -> Child {
    let rw = matches!(args.first().copied(), Some("read") | Some("write"));
    spawn_kazoo_with(&kazoo_python(rw), args)
}

pub fn spawn_kazoo_with(python: &Path, args: &[&str]) -> Child {
    kazoo_command(python, args).spawn().unwrap_or_else(|e| {
        panic!(
            "interop: cannot start {} {} {args:?}: {e}",
            python.display(),
            kazoo_script().display()
        )
    })
}

// ---------------------------------------------------------------------------------- peers

/// A running peer whose stdout is read by a background thread (so pipes never fill up while other
/// peers are being waited on). Killed on drop if still running.
pub struct Peer {
    pub label: String,
    child: Option<Child>,
    stdin: Option<ChildStdin>,
    rx: Receiver<String>,
    eof: bool,
    pub collector: LineCollector,
    pub lines: Vec<String>,
}

/// What a finished peer printed, plus how it ended.
#[derive(Debug, Clone)]
pub struct PeerHistory {
    pub label: String,
    pub collector: LineCollector,
    pub lines: Vec<String>,
    pub status: Option<ExitStatus>,
    pub timed_out: bool,
}

impl PeerHistory {
    pub fn events(&self) -> &[Event] {
        &self.collector.events
    }

    /// Events with token = sequence number of the held node (exclusive kinds only).
    pub fn events_with_seq_tokens(&self) -> Vec<Event> {
        self.collector.events_with_seq_tokens()
    }

    pub fn nodes(&self) -> &[Option<String>] {
        &self.collector.nodes
    }

    pub fn is_ok(&self) -> bool {
        !self.timed_out
            && self.status.is_some_and(|s| s.success())
            && self.collector.errors.is_empty()
            && self.collector.ready
            && self.collector.done
    }

    /// Panic unless the peer connected, printed DONE, reported no ERR and exited 0.
    #[track_caller]
    pub fn assert_ok(&self) {
        if !self.is_ok() {
            panic!(
                "interop peer {} failed: status={:?} timed_out={} ready={} done={} errors={:?}\noutput:\n{}",
                self.label,
                self.status,
                self.timed_out,
                self.collector.ready,
                self.collector.done,
                self.collector.errors,
                self.lines.join("\n")
            );
        }
    }
}

impl Peer {
    pub fn new(label: &str, mut child: Child) -> Peer {
        let stdout = child
            .stdout
            .take()
            .expect("interop: peer stdout must be piped");
        let stdin = child.stdin.take();
        let (tx, rx) = mpsc::channel();
        std::thread::Builder::new()
            .name(format!("peer-{label}"))
            .spawn(move || {
                for line in BufReader::new(stdout).lines() {
                    match line {
                        Ok(l) => {
                            if tx.send(l).is_err() {
                                break;
                            }
                        }
                        Err(_) => break,
                    }
                }
            })
            .expect("spawn reader thread");
        Peer {
            label: label.to_string(),
            child: Some(child),
            stdin,
            rx,
            eof: false,
            collector: LineCollector::new(label),
            lines: Vec::new(),
        }
    }

    pub fn curator(label: &str, args: &[&str]) -> Peer {
        Peer::new(label, spawn_curator(args))
    }

    pub fn kazoo(label: &str, args: &[&str]) -> Peer {
        Peer::new(label, spawn_kazoo(args))
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(|c| c.id())
    }

    fn take_line(&mut self, l: String) -> Option<InteropLine> {
        self.collector.feed(&l);
        let parsed = super::history::parse_interop_line(&l);
        self.lines.push(l);
        parsed
    }

    /// Read lines until one satisfies `pred` (returned) or the deadline / EOF (None).
    pub fn wait_for(
        &mut self,
        timeout: Duration,
        mut pred: impl FnMut(&InteropLine) -> bool,
    ) -> Option<InteropLine> {
        let deadline = Instant::now() + timeout;
        while !self.eof {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.rx.recv_timeout(left) {
                Ok(l) => {
                    if let Some(p) = self.take_line(l) {
                        if pred(&p) {
                            return Some(p);
                        }
                    }
                }
                Err(RecvTimeoutError::Timeout) => return None,
                Err(RecvTimeoutError::Disconnected) => self.eof = true,
            }
        }
        None
    }

    /// Wait for READY; panics with the output so far on ERR/EOF/timeout.
    #[track_caller]
    pub fn wait_ready(&mut self, timeout: Duration) {
        match self.wait_for(timeout, |l| {
            matches!(l, InteropLine::Ready | InteropLine::Err(_))
        }) {
            Some(InteropLine::Ready) => {}
            other => panic!(
                "interop peer {} not READY within {timeout:?}: {other:?}\noutput:\n{}",
                self.label,
                self.lines.join("\n")
            ),
        }
    }

    /// Wait for the next ACQ; returns the node name it reported (None if `-`). Panics on ERR/EOF/timeout.
    #[track_caller]
    pub fn wait_acquired(&mut self, timeout: Duration) -> Option<String> {
        match self.wait_for(timeout, |l| {
            matches!(l, InteropLine::Acq { .. } | InteropLine::Err(_))
        }) {
            Some(InteropLine::Acq { node, .. }) => node,
            other => panic!(
                "interop peer {} did not acquire within {timeout:?}: {other:?}\noutput:\n{}",
                self.label,
                self.lines.join("\n")
            ),
        }
    }

    /// Close the peer's stdin (ends `hold` mode).
    pub fn close_stdin(&mut self) {
        self.stdin = None;
    }

    /// Write to the peer's stdin (any input is ignored by the peers; EOF is what matters).
    pub fn write_stdin(&mut self, data: &[u8]) {
        if let Some(s) = self.stdin.as_mut() {
            let _ = s.write_all(data);
        }
    }

    /// Kill the peer now (simulates a crash; its session ends when the server expires it).
    pub fn kill(&mut self) {
        if let Some(c) = self.child.as_mut() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Close stdin, read everything until EOF and wait for exit, killing the peer after `timeout`.
    pub fn finish(mut self, timeout: Duration) -> PeerHistory {
        self.finish_until(Instant::now() + timeout)
    }

    fn finish_until(&mut self, deadline: Instant) -> PeerHistory {
        self.stdin = None;
        let mut timed_out = false;
        while !self.eof {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.rx.recv_timeout(left) {
                Ok(l) => {
                    self.take_line(l);
                }
                Err(RecvTimeoutError::Timeout) => {
                    timed_out = true;
                    break;
                }
                Err(RecvTimeoutError::Disconnected) => self.eof = true,
            }
        }
        let mut status = None;
        if let Some(mut c) = self.child.take() {
            loop {
                match c.try_wait() {
                    Ok(Some(s)) => {
                        status = Some(s);
                        break;
                    }
                    Ok(None) if !timed_out && Instant::now() < deadline => {
                        std::thread::sleep(Duration::from_millis(10))
                    }
                    _ => {
                        timed_out = true;
                        let _ = c.kill();
                        status = c.wait().ok();
                        break;
                    }
                }
            }
        }
        // drain what arrived before the kill
        while let Ok(l) = self.rx.try_recv() {
            self.take_line(l);
        }
        let mut collector = std::mem::take(&mut self.collector);
        collector.finish(monotonic_ns());
        if timed_out {
            collector
                .errors
                .push(format!("timed out; killed (status {status:?})"));
        }
        PeerHistory {
            label: self.label.clone(),
            collector,
            lines: std::mem::take(&mut self.lines),
            status,
            timed_out,
        }
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Read a child's whole output into events (the child must have piped stdout).
pub fn collect_events(label: &str, child: Child, timeout: Duration) -> PeerHistory {
    Peer::new(label, child).finish(timeout)
}

/// Finish several peers with one shared deadline.
pub fn finish_all(peers: Vec<Peer>, timeout: Duration) -> Vec<PeerHistory> {
    let deadline = Instant::now() + timeout;
    peers
        .into_iter()
        .map(|mut p| p.finish_until(deadline))
        .collect()
}

/// All events of several histories, with seq-number tokens on exclusive events if `seq_tokens`.
pub fn all_events(histories: &[PeerHistory], seq_tokens: bool) -> Vec<Event> {
    histories
        .iter()
        .flat_map(|h| {
            if seq_tokens {
                h.events_with_seq_tokens()
            } else {
                h.events().to_vec()
            }
        })
        .collect()
}

/// Children of `path` with their data, via kazoo (`NODE <name> <ephemeralOwner> <data repr>`).
pub fn list_children(connect: &str, path: &str) -> Vec<(String, String)> {
    let h = collect_events(
        "list",
        spawn_kazoo_with(&kazoo_python(false), &["list", connect, path]),
        Duration::from_secs(30),
    );
    h.assert_ok();
    h.lines
        .iter()
        .filter_map(|l| match super::history::parse_interop_line(l) {
            Some(InteropLine::Node { name, rest }) => Some((name, rest)),
            _ => None,
        })
        .collect()
}
