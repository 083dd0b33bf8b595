//! Section 6, the peers: `../shared/bench/peers/run.sh` (raw Java client, Curator, kazoo; its own
//! ZooKeeper with the same settings), run as it is, with our windows passed on.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use crate::common::*;
use crate::Cfg;

pub fn script() -> Option<PathBuf> {
    if let Ok(p) = std::env::var("PEER_BENCH") {
        return Some(PathBuf::from(p));
    }
    [
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared/bench/peers/run.sh"),
        PathBuf::from("../shared/bench/peers/run.sh"),
    ]
    .into_iter()
    .find(|p| p.is_file())
}

pub fn parse_metrics(text: &str) -> BTreeMap<String, f64> {
    text.lines()
        .filter_map(|l| {
            let mut it = l.split_whitespace();
            (it.next()? == "METRIC").then_some(())?;
            let name = it.next()?.to_string();
            let v = it.next()?.parse::<f64>().ok()?;
            Some((name, v))
        })
        .collect()
}

/// One run of the peers' script; `None` (said why) when it is missing or printed nothing.
pub fn run(cfg: &Cfg, round: usize) -> Res<Option<BTreeMap<String, f64>>> {
    let Some(script) = script() else {
        println!();
        println!("== peers: no script (looked for $PEER_BENCH and ../shared/bench/peers/run.sh)");
        return Ok(None);
    };
    section(&format!(
        "6. peers: {} (its progress goes to stderr)",
        script.display()
    ));
    let out_file = std::env::temp_dir().join(format!("zkr-bench-peers-{round}.txt"));
    let _ = std::fs::remove_file(&out_file);
    let status = Command::new("bash")
        .arg(&script)
        .env("PB_OUT", &out_file)
        .env("PB_WARM", cfg.warm.to_string())
        .env("PB_DUR", cfg.dur.to_string())
        .env("PB_CDUR", cfg.cdur.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .output()?;
    let stdout = String::from_utf8_lossy(&status.stdout);
    if round == 1 {
        for line in stdout.lines().filter(|l| l.starts_with("META ")) {
            println!("   {line}");
        }
    }
    let text = std::fs::read_to_string(&out_file).unwrap_or_else(|_| stdout.to_string());
    let metrics = parse_metrics(&text);
    for (k, v) in &metrics {
        println!("METRIC {k} {}", fmt_num(*v));
    }
    println!(
        "   peers' script exited with {}; {} METRIC lines, kept in {} (load average now {})",
        status.status,
        metrics.len(),
        out_file.display(),
        loadavg()
    );
    Ok((!metrics.is_empty()).then_some(metrics))
}
