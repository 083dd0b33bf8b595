//! The signals `zkr` catches: passed on to CMD while it runs, or ending `zkr` while it waits.
//!
//! Once a handler is installed a signal no longer kills `zkr` by default, so every phase
//! (connecting, waiting, running CMD) selects on [`Signals::recv`].

use std::io;

use nix::sys::signal::{killpg, Signal as Sig};
use nix::unistd::Pid;
use tokio::signal::unix::{signal, Signal, SignalKind};

pub const SIGHUP: i32 = Sig::SIGHUP as i32;
pub const SIGINT: i32 = Sig::SIGINT as i32;
pub const SIGQUIT: i32 = Sig::SIGQUIT as i32;
pub const SIGKILL: i32 = Sig::SIGKILL as i32;
pub const SIGTERM: i32 = Sig::SIGTERM as i32;
pub const SIGCONT: i32 = Sig::SIGCONT as i32;
pub const SIGUSR1: i32 = Sig::SIGUSR1 as i32;
pub const SIGUSR2: i32 = Sig::SIGUSR2 as i32;

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
            _ = self.int.recv() => SIGINT,
            _ = self.term.recv() => SIGTERM,
            _ = self.hup.recv() => SIGHUP,
            _ = self.quit.recv() => SIGQUIT,
            _ = self.usr1.recv() => SIGUSR1,
            _ = self.usr2.recv() => SIGUSR2,
        }
    }

    /// The next signal that should end `zkr` when no CMD runs (SIGUSR1/2 are ignored then).
    /// Cancel safe.
    pub async fn recv_stop(&mut self) -> i32 {
        loop {
            let sig = self.recv().await;
            if sig != SIGUSR1 && sig != SIGUSR2 {
                return sig;
            }
        }
    }
}

/// `SIGTERM`-style name of a signal number, for messages.
pub fn name(sig: i32) -> String {
    match Sig::try_from(sig) {
        Ok(known) => known.as_str().to_string(),
        Err(_) => format!("signal {sig}"),
    }
}

/// Sends `sig` to the process group `pgid`. Errors (the group is gone) are ignored.
pub fn kill_group(pgid: i32, sig: i32) {
    if let (true, Ok(sig)) = (pgid > 1, Sig::try_from(sig)) {
        let _ = killpg(Pid::from_raw(pgid), sig);
    }
}
