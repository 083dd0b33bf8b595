//! `zkr __supervise`: the small process between `zkr` and CMD, so that nothing CMD started
//! outlives `zkr`, whatever ends it.
//!
//! ```text
//! zkr (session, lock)  ──ctl pipe──▶  zkr __supervise  ──fork/exec──▶  CMD (own process group)
//!                      ◀─report pipe─  (own process group,             └─ its children
//!                                       parent-death signal,
//!                                       child subreaper)
//! ```
//!
//! `zkr` re-executes itself (`/proc/self/exe __supervise ...`), so there is no extra binary.
//! The supervisor:
//!
//! * notices the death of `zkr` three ways: end of file on the control pipe (the write end
//!   lives only in `zkr`), `PR_SET_PDEATHSIG` (SIGTERM, only a wake-up), and a check of
//!   `getppid()` every second. It then SIGKILLs CMD's process group and every process that
//!   was re-parented to it, and reaps them. That covers `kill -9`, the OOM killer, and a
//!   shell's `kill -9 %job` (the supervisor is in a process group of its own, so a signal to
//!   `zkr`'s group does not reach it);
//! * is a child subreaper (`PR_SET_CHILD_SUBREAPER`): a process CMD started that left CMD's
//!   group (setsid, double fork) is re-parented to the supervisor when its parent dies, so it
//!   can still be found and stopped;
//! * gives CMD the `PR_SET_PDEATHSIG` SIGKILL too, for the case where the supervisor itself is
//!   killed; `zkr` is a child subreaper as well, so what CMD started is re-parented to `zkr`
//!   then, which SIGKILLs it before releasing the lock (`kill_orphans`);
//! * names itself `zk-supervise` (`PR_SET_NAME`), so that `pkill zkr` leaves it to clean up;
//! * when stdin is a terminal and `zkr` is in the terminal's foreground process group, makes
//!   CMD's group the foreground group (`tcsetpgrp`, from the child before it runs CMD and from
//!   the supervisor, with SIGTTOU blocked as a shell does) and takes the terminal back when
//!   CMD ends. When CMD is stopped from the terminal (Ctrl-Z: SIGTSTP, or SIGTTIN/SIGTTOU) it
//!   takes the terminal back and stops `zkr` with the same signal, so the user's shell gets
//!   its prompt back; on `fg` (SIGCONT to `zkr`, passed on as `cont`) it hands the terminal
//!   back to CMD and continues it;
//! * carries out stops: `stop N` sends N (then SIGCONT) to CMD's group and SIGKILL after the
//!   grace period; `signal N` just passes N on;
//! * when CMD exits, stops whatever CMD left running in its group or re-parented to the
//!   supervisor (SIGTERM, SIGKILL after the grace), so the lock is released only once nothing
//!   CMD started runs.
//!
//! Control lines (from `zkr`): `signal N`, `stop N`, `cont`.
//! Report lines (to `zkr`): `pid N` (CMD runs, N is also its process group), `error CODE
//! MESSAGE` (CMD could not be started; CODE is 126 or 127), `killed` (SIGKILL was sent after
//! the grace period), `exit CODE` (CMD's status, 128+N for signal N; everything it left is
//! gone).

use std::ffi::OsString;
use std::io::Write;
use std::os::fd::{AsFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::fcntl::{fcntl, FcntlArg, FdFlag};
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::prctl;
use nix::sys::signal::{kill, killpg, sigprocmask, SigSet, SigmaskHow, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::{getpgrp, getpid, getppid, isatty, setpgid, tcgetpgrp, tcsetpgrp, Pid};

/// The hidden subcommand: `zkr __supervise PPID CTL_FD REPORT_FD GRACE_MS -- CMD...`.
pub const SUBCOMMAND: &str = "__supervise";

/// The supervisor's process name (`ps`, `pkill`, `killall`): without `zkr` in it.
pub const SUPERVISOR_NAME: &std::ffi::CStr = c"zk-supervise";

/// The arguments `zkr` passes.
struct Args {
    ppid: Pid,
    ctl: RawFd,
    report: RawFd,
    grace: Duration,
    cmd: Vec<OsString>,
}

fn parse(args: &[OsString]) -> Result<Args, String> {
    let num = |i: usize| -> Result<i64, String> {
        args.get(i)
            .and_then(|a| a.to_str())
            .and_then(|a| a.parse().ok())
            .ok_or_else(|| format!("argument {i} is not a number"))
    };
    if args.get(4).is_none_or(|a| a != "--") || args.len() < 6 {
        return Err("usage: zkr __supervise PPID CTL_FD REPORT_FD GRACE_MS -- CMD...".into());
    }
    Ok(Args {
        ppid: Pid::from_raw(num(0)? as i32),
        ctl: num(1)? as RawFd,
        report: num(2)? as RawFd,
        grace: Duration::from_millis(num(3)? as u64),
        cmd: args[5..].to_vec(),
    })
}

/// Runs the supervisor with the arguments after `__supervise`; never returns.
pub fn main(args: &[OsString]) -> ! {
    let args = match parse(args) {
        Ok(args) => args,
        Err(e) => {
            eprintln!("zkr: {SUBCOMMAND} is internal to zkr: {e}");
            std::process::exit(crate::EXIT_USAGE);
        }
    };
    let code = match Supervisor::start(args) {
        Ok(mut sup) => sup.run(),
        Err(e) => {
            eprintln!("zkr: cannot supervise CMD: {e}");
            crate::EXIT_FAILURE
        }
    };
    std::process::exit(code)
}

/// The signals the supervisor takes through its signalfd (blocked otherwise). Blocking SIGTTOU
/// is what lets it call `tcsetpgrp` from a background process group, as a shell does.
fn handled() -> SigSet {
    let mut set = SigSet::empty();
    for sig in [
        Signal::SIGCHLD,
        Signal::SIGTERM,
        Signal::SIGINT,
        Signal::SIGHUP,
        Signal::SIGQUIT,
        Signal::SIGUSR1,
        Signal::SIGUSR2,
        Signal::SIGTTOU,
        Signal::SIGTTIN,
        Signal::SIGCONT,
    ] {
        set.add(sig);
    }
    set
}

struct Supervisor {
    args: Args,
    ctl: Option<OwnedFd>,
    ctl_buf: Vec<u8>,
    report: std::fs::File,
    signals: SignalFd,
    /// stdin is a terminal: do job control.
    tty: bool,
    /// `zkr`'s process group, which gets the terminal back.
    zkr_pgrp: Pid,
    cmd: Pid,
    /// CMD's status once it ended (128+N for signal N).
    status: Option<i32>,
    /// A stop in progress: when to send SIGKILL, and whether it was sent.
    kill_at: Option<Instant>,
    killed: bool,
    /// `zkr` was stopped because CMD was (Ctrl-Z): continue CMD on `cont`.
    job_stopped: bool,
}

fn cloexec(fd: RawFd) -> nix::Result<OwnedFd> {
    // SAFETY: `zkr` passed these descriptors to us and nothing else in this process owns them;
    // fcntl on a closed descriptor fails with EBADF before we take ownership.
    let borrowed = unsafe { BorrowedFd::borrow_raw(fd) };
    fcntl(borrowed, FcntlArg::F_SETFD(FdFlag::FD_CLOEXEC))?;
    // SAFETY: as above: the descriptor is open and ours alone.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

impl Supervisor {
    fn start(args: Args) -> Result<Supervisor, String> {
        let handled = handled();
        sigprocmask(SigmaskHow::SIG_BLOCK, Some(&handled), None)
            .map_err(|e| format!("sigprocmask: {e}"))?;
        let signals =
            SignalFd::with_flags(&handled, SfdFlags::SFD_CLOEXEC | SfdFlags::SFD_NONBLOCK)
                .map_err(|e| format!("signalfd: {e}"))?;
        // A wake-up only: what counts is getppid() (the signal also comes when the thread
        // that forked us ends, and not at all if zkr died before this call).
        prctl::set_pdeathsig(Signal::SIGTERM).map_err(|e| format!("PR_SET_PDEATHSIG: {e}"))?;
        if getppid() != args.ppid {
            return Err("zkr is gone already".into());
        }
        prctl::set_child_subreaper(true).map_err(|e| format!("PR_SET_CHILD_SUBREAPER: {e}"))?;
        // A name of our own for `ps` (run as `/proc/self/exe`, we would show as `exe`),
        // without `zkr` in it, so that `pkill zkr` or `killall -9 zkr` meant for zkr leaves
        // us alive to stop what CMD started: killed together, a process CMD moved out of its
        // group (setsid) would outlive both (see the README's zkr section).
        let _ = prctl::set_name(SUPERVISOR_NAME);
        let zkr_pgrp = getpgrp();
        // Out of zkr's process group, so that a signal to that group (a shell's `kill -9
        // %job`) leaves us alive to clean up.
        let _ = setpgid(Pid::from_raw(0), Pid::from_raw(0));
        let ctl = cloexec(args.ctl).map_err(|e| format!("control pipe: {e}"))?;
        let report = cloexec(args.report).map_err(|e| format!("report pipe: {e}"))?;
        let tty = isatty(std::io::stdin()).unwrap_or(false);
        Ok(Supervisor {
            args,
            ctl: Some(ctl),
            ctl_buf: Vec::new(),
            report: std::fs::File::from(report),
            signals,
            tty,
            zkr_pgrp,
            cmd: Pid::from_raw(0),
            status: None,
            kill_at: None,
            killed: false,
            job_stopped: false,
        })
    }

    fn say(&mut self, line: &str) {
        // zkr gone: the control pipe tells us too.
        let _ = writeln!(self.report, "{line}");
    }

    /// Whether `zkr`'s process group owns the terminal now (so it may be handed to CMD).
    fn zkr_in_foreground(&self) -> bool {
        self.tty && tcgetpgrp(std::io::stdin()).is_ok_and(|p| p == self.zkr_pgrp)
    }

    fn give_terminal_to(&self, pgrp: Pid) {
        if self.tty {
            // SIGTTOU is blocked: allowed from a background group.
            let _ = tcsetpgrp(std::io::stdin(), pgrp);
        }
    }

    /// Takes the terminal back for `zkr` if CMD's group has it.
    fn take_terminal_back(&self) {
        if self.tty && tcgetpgrp(std::io::stdin()).is_ok_and(|p| p == self.cmd) {
            self.give_terminal_to(self.zkr_pgrp);
        }
    }

    fn run(&mut self) -> i32 {
        if let Err((code, message)) = self.spawn() {
            self.say(&format!("error {code} {message}"));
            return 0;
        }
        self.say(&format!("pid {}", self.cmd));
        loop {
            if let Some(status) = self.status {
                self.take_terminal_back();
                self.clean_up_after(status);
                self.say(&format!("exit {status}"));
                return 0;
            }
            self.wait_for_events();
        }
    }

    /// Forks and runs CMD in a new process group (the foreground one if we may).
    fn spawn(&mut self) -> Result<(), (i32, String)> {
        let foreground = self.zkr_in_foreground();
        let mut command = std::process::Command::new(&self.args.cmd[0]);
        command.args(&self.args.cmd[1..]);
        // SAFETY: the closure only makes async-signal-safe system calls (setpgid, prctl,
        // sigprocmask, tcsetpgrp, getpid) and allocates nothing.
        unsafe {
            let supervisor = getpid();
            command.pre_exec(move || {
                setpgid(Pid::from_raw(0), Pid::from_raw(0))?;
                prctl::set_pdeathsig(Signal::SIGKILL)?;
                // Died between the fork and the line above: the signal will never come.
                if getppid() != supervisor {
                    return Err(std::io::Error::other("the supervisor is gone"));
                }
                let mut ttou = SigSet::empty();
                ttou.add(Signal::SIGTTOU);
                sigprocmask(SigmaskHow::SIG_BLOCK, Some(&ttou), None)?;
                if foreground {
                    // Before exec, so that CMD never reads the terminal from the background.
                    let _ = tcsetpgrp(std::io::stdin(), getpid());
                }
                sigprocmask(SigmaskHow::SIG_SETMASK, Some(&SigSet::empty()), None)?;
                Ok(())
            });
        }
        let child = command.spawn().map_err(|e| {
            let code = if e.kind() == std::io::ErrorKind::NotFound {
                127
            } else {
                126
            };
            (
                code,
                format!("cannot run {:?}: {e}", self.args.cmd[0].to_string_lossy()),
            )
        })?;
        self.cmd = Pid::from_raw(child.id() as i32);
        // `child` is only a pid from here on: we reap with waitpid ourselves.
        drop(child);
        let _ = setpgid(self.cmd, self.cmd);
        if foreground {
            self.give_terminal_to(self.cmd);
        }
        Ok(())
    }

    /// Waits for one round of events (signals, control lines, the kill deadline).
    fn wait_for_events(&mut self) {
        let now = Instant::now();
        let mut wait = Duration::from_secs(1);
        if let (Some(at), false) = (self.kill_at, self.killed) {
            wait = wait.min(at.saturating_duration_since(now));
        }
        let timeout = PollTimeout::try_from(wait).unwrap_or(PollTimeout::MAX);
        let (sig_ready, ctl_ready) = {
            let mut fds = vec![PollFd::new(self.signals.as_fd(), PollFlags::POLLIN)];
            if let Some(ctl) = &self.ctl {
                fds.push(PollFd::new(ctl.as_fd(), PollFlags::POLLIN));
            }
            match poll(&mut fds, timeout) {
                Ok(_) => {
                    let ready = |fd: &PollFd| fd.revents().is_some_and(|r| !r.is_empty());
                    (ready(&fds[0]), fds.get(1).is_some_and(ready))
                }
                Err(Errno::EINTR) => (false, false),
                Err(e) => {
                    eprintln!("zkr: supervisor: poll: {e}");
                    (true, true)
                }
            }
        };
        if sig_ready {
            self.read_signals();
        }
        if ctl_ready {
            self.read_control();
        }
        if getppid() != self.args.ppid {
            self.parent_gone();
        }
        if let (Some(at), false) = (self.kill_at, self.killed) {
            if Instant::now() >= at {
                self.killed = true;
                self.kill_everything(Signal::SIGKILL);
                self.say("killed");
            }
        }
    }

    fn read_signals(&mut self) {
        while let Ok(Some(info)) = self.signals.read_signal() {
            match Signal::try_from(info.ssi_signo as i32) {
                Ok(Signal::SIGCHLD) => self.reap(),
                Ok(Signal::SIGCONT) => self.continue_job(),
                // SIGTERM is also our parent-death signal; the getppid() check after this
                // round tells. Otherwise zkr decides what CMD gets: ignore.
                _ => {}
            }
        }
        // SIGCHLD coalesces: reap whatever is there anyway.
        self.reap();
    }

    fn read_control(&mut self) {
        let Some(ctl) = &self.ctl else { return };
        let mut chunk = [0u8; 512];
        match nix::unistd::read(ctl, &mut chunk) {
            Ok(0) | Err(Errno::EBADF) => {
                self.ctl = None;
                self.parent_gone();
            }
            Ok(n) => self.ctl_buf.extend_from_slice(&chunk[..n]),
            Err(Errno::EINTR | Errno::EAGAIN) => {}
            Err(_) => {
                self.ctl = None;
                self.parent_gone();
            }
        }
        while let Some(end) = self.ctl_buf.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = self.ctl_buf.drain(..=end).collect();
            let line = String::from_utf8_lossy(&line);
            let mut words = line.split_whitespace();
            let verb = words.next().unwrap_or_default();
            let sig = words
                .next()
                .and_then(|s| s.parse::<i32>().ok())
                .and_then(|n| Signal::try_from(n).ok());
            match (verb, sig) {
                ("signal", Some(sig)) => {
                    let _ = killpg(self.cmd, sig);
                }
                ("stop", Some(sig)) => self.stop(sig),
                ("cont", _) => self.continue_job(),
                _ => {}
            }
        }
    }

    /// `sig` to CMD's group (and to what it left re-parented to us), SIGKILL after the grace.
    fn stop(&mut self, sig: Signal) {
        self.kill_everything(sig);
        // A stopped process acts on the signal only once continued.
        self.kill_everything(Signal::SIGCONT);
        if self.kill_at.is_none() {
            self.kill_at = Some(Instant::now() + self.args.grace);
        }
    }

    /// Sends `sig` to CMD's group and to every process re-parented to us.
    fn kill_everything(&self, sig: Signal) {
        let _ = killpg(self.cmd, sig);
        for pid in adopted(self.cmd) {
            let _ = kill(pid, sig);
        }
    }

    /// Reaps every child that changed state; notes CMD's end, handles CMD being stopped.
    fn reap(&mut self) {
        let flags = WaitPidFlag::WNOHANG | WaitPidFlag::WUNTRACED | WaitPidFlag::WCONTINUED;
        loop {
            match waitpid(None::<Pid>, Some(flags)) {
                Ok(WaitStatus::Exited(pid, code)) if pid == self.cmd => {
                    self.status.get_or_insert(code);
                }
                Ok(WaitStatus::Signaled(pid, sig, _)) if pid == self.cmd => {
                    self.status.get_or_insert(128 + sig as i32);
                }
                Ok(WaitStatus::Stopped(pid, sig)) if pid == self.cmd => self.job_stopped_by(sig),
                Ok(WaitStatus::StillAlive) | Err(_) => return,
                Ok(_) => {}
            }
        }
    }

    /// CMD was stopped. From the terminal (Ctrl-Z, or reading/writing it from the background):
    /// give the terminal back to zkr's group and stop zkr the same way, as a shell would see
    /// CMD stop without zkr. Any other stop (SIGSTOP from someone) is left alone.
    fn job_stopped_by(&mut self, sig: Signal) {
        if !self.tty || !matches!(sig, Signal::SIGTSTP | Signal::SIGTTIN | Signal::SIGTTOU) {
            return;
        }
        if self.kill_at.is_some() {
            // Being stopped for good: keep it running so it can exit.
            let _ = killpg(self.cmd, Signal::SIGCONT);
            return;
        }
        self.take_terminal_back();
        let _ = kill(self.args.ppid, sig);
        // An orphaned process group ignores stop signals from the terminal: if zkr did not
        // stop, nobody would continue CMD, so continue it now.
        std::thread::sleep(Duration::from_millis(50));
        if process_state(self.args.ppid) == Some('T') {
            self.job_stopped = true;
        } else {
            self.continue_job_now();
        }
    }

    /// `fg`/`bg` of zkr (SIGCONT, passed on by zkr as `cont`): continue CMD, in the
    /// foreground if zkr is.
    fn continue_job(&mut self) {
        if self.job_stopped {
            self.job_stopped = false;
            self.continue_job_now();
        }
    }

    fn continue_job_now(&mut self) {
        if self.zkr_in_foreground() {
            self.give_terminal_to(self.cmd);
        }
        let _ = killpg(self.cmd, Signal::SIGCONT);
    }

    /// After CMD ended: whatever it left in its group, or re-parented to us, gets SIGTERM and
    /// SIGKILL after the grace period; then everything is reaped.
    fn clean_up_after(&mut self, status: i32) {
        let left = || group_alive(self.cmd) || !adopted(self.cmd).is_empty();
        if !left() {
            self.reap_all(Duration::from_millis(200));
            return;
        }
        if !self.killed {
            eprintln!(
                "zkr: CMD exited ({status}) but processes it started still run: sent them SIGTERM, SIGKILL in {}",
                crate::duration::human(self.args.grace)
            );
            self.kill_everything(Signal::SIGTERM);
            self.kill_everything(Signal::SIGCONT);
            let deadline = Instant::now() + self.args.grace;
            while left() && Instant::now() < deadline {
                if getppid() != self.args.ppid {
                    self.parent_gone();
                }
                std::thread::sleep(Duration::from_millis(20));
                self.reap_quietly();
            }
        }
        if left() {
            self.kill_everything(Signal::SIGKILL);
        }
        self.reap_all(Duration::from_secs(2));
    }

    /// Reaps children without looking at them (CMD has ended already).
    fn reap_quietly(&self) {
        while let Ok(status) = waitpid(None::<Pid>, Some(WaitPidFlag::WNOHANG)) {
            if status == WaitStatus::StillAlive {
                break;
            }
        }
    }

    /// Reaps until no child is left, SIGKILLing what comes, for at most `within`.
    fn reap_all(&self, within: Duration) {
        let deadline = Instant::now() + within;
        loop {
            self.reap_quietly();
            if waitpid(None::<Pid>, Some(WaitPidFlag::WNOHANG)) == Err(Errno::ECHILD)
                || Instant::now() >= deadline
            {
                return;
            }
            self.kill_everything(Signal::SIGKILL);
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// zkr died (killed, crashed): nothing of CMD's may go on without the lock.
    fn parent_gone(&mut self) -> ! {
        self.killed = true;
        if self.cmd.as_raw() > 0 {
            self.kill_everything(Signal::SIGKILL);
            self.reap_all(Duration::from_secs(2));
        }
        std::process::exit(crate::EXIT_LOST)
    }
}

/// Whether any process of the process group `pgrp` is left (zombies included: reaping ends
/// them).
fn group_alive(pgrp: Pid) -> bool {
    pgrp.as_raw() > 0 && killpg(pgrp, None).is_ok()
}

/// The fields of `/proc/PID/stat` after the command name.
fn stat_fields(pid: &str) -> Option<Vec<String>> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 1..];
    Some(rest.split_whitespace().map(str::to_string).collect())
}

/// A process's state letter (`R`, `S`, `T`, `Z`...).
fn process_state(pid: Pid) -> Option<char> {
    stat_fields(&pid.to_string())?.first()?.chars().next()
}

/// Our children other than CMD that are still running: processes CMD started that were
/// re-parented to us (we are a child subreaper) after their parent ended.
fn adopted(cmd: Pid) -> Vec<Pid> {
    children(false)
        .into_iter()
        .filter(|pid| *pid != cmd)
        .collect()
}

/// This process's children (zombies too if `zombies`), read from `/proc`.
fn children(zombies: bool) -> Vec<Pid> {
    let me = getpid().as_raw().to_string();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|name| name.bytes().all(|b| b.is_ascii_digit()))
        .filter_map(|pid| {
            let fields = stat_fields(&pid)?;
            // fields[0] is the state, fields[1] the parent pid.
            (fields.get(1)? == &me && (zombies || fields.first()? != "Z"))
                .then(|| pid.parse().ok())?
        })
        .map(Pid::from_raw)
        .collect()
}

/// For `zkr`, a child subreaper too, once its supervisor has died without reporting CMD's
/// end (killed alone, say by the OOM killer): CMD and whatever it started that left its
/// process group were re-parented to `zkr`. SIGKILLs and reaps every child of ours, again
/// and again (a killed process's children come to us in turn), until none is left or
/// `within` has passed. Only for after the supervisor has been reaped: it waits for any child.
pub fn kill_orphans(within: Duration) {
    let deadline = Instant::now() + within;
    loop {
        let left = children(true);
        if left.is_empty() || Instant::now() >= deadline {
            return;
        }
        for pid in &left {
            let _ = kill(*pid, Signal::SIGKILL);
        }
        std::thread::sleep(Duration::from_millis(10));
        for pid in left {
            let _ = waitpid(pid, Some(WaitPidFlag::WNOHANG));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_what_zkr_passes() {
        let args: Vec<OsString> = ["123", "3", "4", "500", "--", "sh", "-c", "true"]
            .iter()
            .map(OsString::from)
            .collect();
        let a = parse(&args).unwrap();
        assert_eq!(a.ppid.as_raw(), 123);
        assert_eq!((a.ctl, a.report), (3, 4));
        assert_eq!(a.grace, Duration::from_millis(500));
        assert_eq!(a.cmd, ["sh", "-c", "true"]);
        assert!(parse(&args[..5]).is_err());
        assert!(parse(&args[1..]).is_err());
    }

    #[test]
    fn reads_our_own_state() {
        assert!(matches!(process_state(getpid()), Some('R' | 'S')));
        assert!(adopted(Pid::from_raw(0)).is_empty());
    }
}
