//! `zkr server`: a private ZooKeeper in the foreground, for trying things out.
//!
//! It runs a real ZooKeeper JVM through the test harness (`zk_recipes::testing`), prints its
//! connect string on stdout, and kills the JVM on SIGINT or SIGTERM (the JVM also dies with
//! `zkr`, through the harness's parent-death signal).

use std::time::Duration;

use tokio::signal::unix::{signal, SignalKind};
use zk_recipes::testing::{ServerOptions, ZooKeeperServer};

use crate::cli::ServerArgs;
use crate::signals;
use crate::{Fail, Outcome, EXIT_FAILURE};

pub fn run(args: &ServerArgs) -> Outcome {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Fail::new(EXIT_FAILURE, format!("cannot start the async runtime: {e}")))?;
    runtime.block_on(serve(args))
}

async fn serve(args: &ServerArgs) -> Outcome {
    let mut int = signal(SignalKind::interrupt())
        .map_err(|e| Fail::new(EXIT_FAILURE, format!("cannot install signal handlers: {e}")))?;
    let mut term = signal(SignalKind::terminate())
        .map_err(|e| Fail::new(EXIT_FAILURE, format!("cannot install signal handlers: {e}")))?;
    let mut opts = ServerOptions::new();
    if let Some(port) = args.port {
        opts = opts.with_port(port);
    }
    if let Some(dir) = &args.data_dir {
        opts = opts.with_data_dir(dir);
    }
    let start = tokio::task::spawn_blocking(move || ZooKeeperServer::start_with(opts));
    let server = tokio::select! {
        started = start => match started {
            Ok(Ok(server)) => server,
            Ok(Err(e)) => return Err(Fail::new(EXIT_FAILURE, format!("cannot start ZooKeeper: {e}"))),
            Err(e) => return Err(Fail::new(EXIT_FAILURE, format!("cannot start ZooKeeper: {e}"))),
        },
        // The JVM, if already spawned, dies with us (parent-death signal).
        _ = int.recv() => return Ok(128 + signals::SIGINT),
        _ = term.recv() => return Ok(128 + signals::SIGTERM),
    };
    println!("{}", server.connect_string());
    eprintln!(
        "zkr: ZooKeeper is running at {} (tickTime 500ms: session timeouts 1s..10s; data in {}; log {}).\n\
         zkr: try: export ZK_CONNECT={}   Stop with Ctrl-C.",
        server.connect_string(),
        server.data_dir().display(),
        server.log_path().display(),
        server.connect_string(),
    );
    let mut check = tokio::time::interval(Duration::from_millis(500));
    let outcome = loop {
        tokio::select! {
            _ = int.recv() => break Ok(0),
            _ = term.recv() => break Ok(0),
            _ = check.tick() => {
                if !server.is_running() {
                    break Err(Fail::new(
                        EXIT_FAILURE,
                        format!("the ZooKeeper JVM exited on its own; see {}", server.log_path().display()),
                    ));
                }
            }
        }
    };
    let mut server = server;
    let _ = tokio::task::spawn_blocking(move || {
        let _ = server.kill();
        drop(server);
    })
    .await;
    if outcome.is_ok() {
        eprintln!("zkr: ZooKeeper stopped");
    }
    outcome
}
