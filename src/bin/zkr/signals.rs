//! The signals `zkr` catches: passed on to CMD while it runs, or ending `zkr` while it waits.
//!
//! Once a handler is installed a signal no longer kills `zkr` by default, so every phase
//! (connecting, waiting, running CMD) selects on [`Signals::recv`].

use std::io;

use tokio::signal::unix::{signal, Signal, SignalKind};

/// The signals forwarded to CMD's process group while it runs.
pub struct Signals {
    int: Signal,
    term: Signal,
    hup: Signal,
    quit: Signal,
    usr1: Signal,
    usr2: Signal,
}

impl Signals {
    /// Installs the handlers. Must run inside the tokio runtime.
    pub fn install() -> io::Result<Signals> {
        Ok(Signals {
            int: signal(SignalKind::interrupt())?,
            term: signal(SignalKind::terminate())?,
            hup: signal(SignalKind::hangup())?,
            quit: signal(SignalKind::quit())?,
            usr1: signal(SignalKind::user_defined1())?,
            usr2: signal(SignalKind::user_defined2())?,
        })
    }

    /// The next signal received, as its number. Cancel safe.
    pub async fn recv(&mut self) -> i32 {
        tokio::select! {
            _ = self.int.recv() => libc::SIGINT,
            _ = self.term.recv() => libc::SIGTERM,
            _ = self.hup.recv() => libc::SIGHUP,
            _ = self.quit.recv() => libc::SIGQUIT,
            _ = self.usr1.recv() => libc::SIGUSR1,
            _ = self.usr2.recv() => libc::SIGUSR2,
        }
    }

    /// The next signal that should end `zkr` when no CMD runs (SIGUSR1/2 are ignored then).
    /// Cancel safe.
    pub async fn recv_stop(&mut self) -> i32 {
        loop {
            let sig = self.recv().await;
            if sig != libc::SIGUSR1 && sig != libc::SIGUSR2 {
                return sig;
            }
        }
    }
}

/// `SIGTERM`-style name of a signal number, for messages.
pub fn name(sig: i32) -> String {
    let known = match sig {
        libc::SIGHUP => "SIGHUP",
        libc::SIGINT => "SIGINT",
        libc::SIGQUIT => "SIGQUIT",
        libc::SIGKILL => "SIGKILL",
        libc::SIGUSR1 => "SIGUSR1",
        libc::SIGUSR2 => "SIGUSR2",
        libc::SIGTERM => "SIGTERM",
        libc::SIGPIPE => "SIGPIPE",
        libc::SIGABRT => "SIGABRT",
        libc::SIGSEGV => "SIGSEGV",
        _ => return format!("signal {sig}"),
    };
    known.to_string()
}

/// Sends `sig` to the process group `pgid`. Errors (the group is gone) are ignored.
pub fn kill_group(pgid: i32, sig: i32) {
    if pgid > 1 {
        // SAFETY: kill(2) has no memory preconditions; a negative pid names a process group.
        unsafe {
            libc::kill(-pgid, sig);
        }
    }
}
