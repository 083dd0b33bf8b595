//! `zkr holders`, and the names shared with the waiting line (roles come from the library).

use futures::StreamExt;
use serde_json::json;
use zk_recipes::{Contender, Election, ExclusiveLock, Layout, Leader, LeaderChange, Role, Session};

use crate::cli::{HoldersArgs, LeaderArgs};
use crate::duration::human;
use crate::signals::Signals;
use crate::{Fail, Outcome};

pub fn layout_name(c: &Contender) -> &'static str {
    if c.node.sequence.is_none() {
        return "simple";
    }
    match c.node.layout {
        Layout::Curator => "curator",
        Layout::Kazoo => "kazoo",
        _ => "other",
    }
}

/// The contender's data as text, for display (control characters escaped).
pub fn data_text(c: &Contender) -> String {
    String::from_utf8_lossy(&c.data)
        .chars()
        .flat_map(|ch| {
            if ch.is_control() {
                ch.escape_default().collect::<Vec<_>>()
            } else {
                vec![ch]
            }
        })
        .collect()
}

/// Who a contender is: its data when it is a short readable id, else its session.
pub fn who(c: &Contender) -> String {
    let text = String::from_utf8_lossy(&c.data);
    let text = text.trim();
    if text.is_empty() || text.chars().any(char::is_control) || text.chars().count() > 60 {
        format!("session {:#x}", c.owner)
    } else {
        text.to_string()
    }
}

/// The identity `zkr` stores in its contender nodes: `<hostname>:<pid>`.
pub fn own_identity() -> String {
    let host = nix::unistd::gethostname()
        .map(|h| h.to_string_lossy().into_owned())
        .unwrap_or_else(|_| "unknown-host".to_string());
    format!("{host}:{}", std::process::id())
}

fn contender_json(c: &Contender, role: Role, position: usize, dir: &str) -> serde_json::Value {
    let path = if c.node.sequence.is_none() {
        dir.to_string()
    } else {
        format!("{dir}/{}", c.node.name)
    };
    json!({
        "position": position,
        "role": role.as_str(),
        "node": c.node.name,
        "path": path,
        "kind": c.node.kind.as_str(),
        "layout": layout_name(c),
        "sequence": c.node.sequence,
        "owner": format!("{:#x}", c.owner),
        "age_ms": c.age.as_millis() as u64,
        "data": String::from_utf8_lossy(&c.data),
        "fencing_token": c.czxid,
    })
}

/// Every contender of `path`; when there are none and `path` itself is an ephemeral node, the
/// simple lock's holder.
pub async fn all_contenders(session: &Session, path: &str) -> Result<Vec<Contender>, Fail> {
    let mut list = zk_recipes::list_contenders(session, path)
        .await
        .map_err(|e| Fail::from_error(&format!("cannot list {path}"), e))?;
    if list.is_empty() {
        let simple =
            ExclusiveLock::new(session, path).map_err(|e| Fail::from_error("holders", e))?;
        if let Ok(Some(holder)) = simple.holder().await {
            if holder.owner != 0 {
                list.push(holder);
            }
        }
    }
    Ok(list)
}

/// `zkr holders PATH [--json] [--permits N]`.
pub async fn holders(session: &Session, args: &HoldersArgs) -> Outcome {
    let list = all_contenders(session, &args.path).await?;
    // The library's roles, with the semaphore's stored permit count; `--permits` names it
    // for a semaphore that stores none (Curator's, kazoo's).
    let roles: Vec<Role> = match args.permits {
        Some(p) => zk_recipes::roles(&list, Some(p as usize)),
        None => list.iter().map(|c| c.role).collect(),
    };
    if args.json {
        let items: Vec<_> = list
            .iter()
            .zip(&roles)
            .enumerate()
            .map(|(i, (c, r))| contender_json(c, *r, i + 1, &args.path))
            .collect();
        println!("{}", json!({ "path": args.path, "contenders": items }));
        return Ok(0);
    }
    if list.is_empty() {
        eprintln!("zkr: nobody holds or waits for {}", args.path);
        return Ok(0);
    }
    let mut rows = vec![[
        "#".to_string(),
        "ROLE".into(),
        "NODE".into(),
        "KIND".into(),
        "LAYOUT".into(),
        "OWNER".into(),
        "AGE".into(),
        "DATA".into(),
    ]];
    for (i, (c, r)) in list.iter().zip(&roles).enumerate() {
        let mut data = data_text(c);
        if data.chars().count() > 48 {
            data = data.chars().take(47).collect::<String>() + "…";
        }
        rows.push([
            (i + 1).to_string(),
            r.as_str().into(),
            c.node.name.clone(),
            c.node.kind.as_str().into(),
            layout_name(c).into(),
            format!("{:#x}", c.owner),
            human(c.age),
            data,
        ]);
    }
    let mut widths = [0usize; 8];
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    for row in &rows {
        let mut line = String::new();
        for (i, (cell, w)) in row.iter().zip(widths).enumerate() {
            if i + 1 == row.len() {
                line.push_str(cell);
            } else {
                line.push_str(&format!("{cell:<w$}  "));
            }
        }
        println!("{}", line.trim_end());
    }
    Ok(0)
}

fn leader_json(path: &str, leader: Option<&Leader>) -> serde_json::Value {
    let leader = leader.map(|l| {
        json!({
            "id": l.id,
            "node": l.node,
            "owner": format!("{:#x}", l.session_id),
            "fencing_token": l.fencing_token,
        })
    });
    json!({ "path": path, "leader": leader })
}

/// `zkr leader PATH [--watch] [--json]`. Without `--watch` the status is 1 when there is no
/// leader (nothing is printed on stdout then, or `"leader": null` with `--json`).
pub async fn leader(session: &Session, args: &LeaderArgs, signals: &mut Signals) -> Outcome {
    let path = args.path.as_str();
    // An observer: it never campaigns, so its id is never written.
    let election = Election::new(session, path, "").map_err(|e| Fail::from_error("", e))?;
    if !args.watch {
        let leader = election
            .leader()
            .await
            .map_err(|e| Fail::from_error(&format!("cannot read the leader of {path}"), e))?;
        if args.json {
            println!("{}", leader_json(path, leader.as_ref()));
        } else if let Some(l) = &leader {
            println!("{}", l.id);
        }
        if leader.is_none() {
            eprintln!("zkr: {path} has no leader");
            return Ok(1);
        }
        return Ok(0);
    }
    let mut changes = election.observe();
    loop {
        let change = tokio::select! {
            change = changes.next() => change,
            _ = signals.recv_stop() => return Ok(0),
        };
        let change = match change {
            Some(Ok(change)) => change,
            Some(Err(e)) => {
                return Err(Fail::from_error(
                    &format!("cannot watch the leader of {path}"),
                    e,
                ))
            }
            None => return Err(Fail::new(crate::EXIT_FAILURE, "the session ended")),
        };
        let leader = match &change {
            LeaderChange::Elected(l) => Some(l),
            _ => None,
        };
        if args.json {
            println!("{}", leader_json(path, leader));
        } else {
            println!("{}", leader.map_or("(none)", |l| l.id.as_str()));
        }
    }
}

/// A one-line description of who holds, for the waiting line and `--try` refusals:
/// `held by <id> for 12s`, `held by <id> and 2 others` (`verb` is `held`, or `led` for an
/// election).
pub fn held_by(holders: &[&Contender], verb: &str) -> Option<String> {
    let first = holders.first()?;
    Some(match holders.len() {
        1 => format!("{verb} by {} for {}", who(first), human(first.age)),
        n => format!(
            "{verb} by {} and {} other{}",
            who(first),
            n - 1,
            if n == 2 { "" } else { "s" }
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;
    use zk_recipes::NodeName;

    fn c(name: &str) -> Contender {
        Contender {
            node: NodeName::parse(name).unwrap(),
            owner: 1,
            data: b"x".to_vec(),
            age: Duration::from_secs(1),
            czxid: 1,
            role: zk_recipes::Role::Unknown,
        }
    }

    const U: &str = "_c_0f9a2a2e-7d6e-4c4b-9a53-5b7f6f1d2c3b";

    #[test]
    fn who_prefers_readable_data() {
        let mut x = c(&format!("{U}-lock-0000000001"));
        x.data = b"web-1:42".to_vec();
        assert_eq!(who(&x), "web-1:42");
        x.data = vec![];
        x.owner = 0x10;
        assert_eq!(who(&x), "session 0x10");
    }
}
