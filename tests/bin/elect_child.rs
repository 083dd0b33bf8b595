//! A leader-election candidate in its own process, for the fault tests of `tests/election.rs`
//! (a test can SIGSTOP or SIGKILL a process, not a task).
//!
//! ```text
//! cargo run --features testing --bin elect_child -- CONNECT PATH ID [SESSION_TIMEOUT_MS]
//! ```
//!
//! It campaigns, and campaigns again after each loss, until its stdin reaches EOF; then it
//! resigns, closes its session and exits. It prints the line protocol of
//! `tests/interop/Interop.java` on stdout, one flushed line per event, with CLOCK_MONOTONIC
//! nanosecond timestamps:
//!
//! ```text
//! READY                                   connected
//! REQ <ns> latch <id>                     about to campaign
//! ACQ <ns> latch <id> <node>              campaign returned: leading
//! REL <ns> latch <id> [lost]              about to resign, or ("lost") leadership was lost
//! ERR <message>                           failure (exit status 1)
//! DONE                                    finished normally
//! ```
//!
//! The session uses the default `Grace` loss policy, so after a pause longer than the session
//! timeout the first thing the process reports when it runs again is `REL … lost`.

use std::io::Write;
use std::time::Duration;

use tokio::io::AsyncReadExt;
use tokio_util::sync::CancellationToken;
use zk_recipes::testing::monotonic_nanos;
use zk_recipes::{Election, Session};

fn out(line: &str) {
    let mut stdout = std::io::stdout().lock();
    let _ = writeln!(stdout, "{line}");
    let _ = stdout.flush();
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.len() < 3 {
        out("ERR usage: elect_child CONNECT PATH ID [SESSION_TIMEOUT_MS]");
        std::process::exit(2);
    }
    let timeout_ms: u64 = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(4000);
    match run(
        &args[0],
        &args[1],
        &args[2],
        Duration::from_millis(timeout_ms),
    )
    .await
    {
        Ok(()) => out("DONE"),
        Err(err) => {
            out(&format!("ERR {}", err.to_string().replace('\n', " ")));
            std::process::exit(1);
        }
    }
}

async fn run(
    connect: &str,
    path: &str,
    id: &str,
    session_timeout: Duration,
) -> zk_recipes::Result<()> {
    let session = Session::builder(connect)
        .with_session_timeout(session_timeout)
        .connect()
        .await?;
    let election = Election::new(&session, path, id)?;
    // Stdin EOF is the signal to finish.
    let eof = CancellationToken::new();
    {
        let eof = eof.clone();
        tokio::spawn(async move {
            let mut stdin = tokio::io::stdin();
            let mut buf = [0u8; 256];
            while matches!(stdin.read(&mut buf).await, Ok(n) if n > 0) {}
            eof.cancel();
        });
    }
    out("READY");
    loop {
        out(&format!("REQ {} latch {id}", monotonic_nanos()));
        let leadership = tokio::select! {
            _ = eof.cancelled() => break,
            l = election.campaign() => l?,
        };
        let node = leadership
            .path()
            .rsplit('/')
            .next()
            .unwrap_or("-")
            .to_string();
        out(&format!(
            "ACQ {} latch {id} {node} {}",
            monotonic_nanos(),
            leadership.fencing_token()
        ));
        tokio::select! {
            _ = leadership.lost() => {
                out(&format!("REL {} latch {id} lost", monotonic_nanos()));
            }
            _ = eof.cancelled() => {
                out(&format!("REL {} latch {id}", monotonic_nanos()));
                leadership.resign().await?;
                break;
            }
        }
    }
    session.close().await;
    Ok(())
}
