//! Metrics and spans, through the ecosystem's facades: the library emits, the application
//! picks the exporter (`metrics-exporter-prometheus`, `tracing-subscriber`, ...). With no
//! recorder or subscriber installed every call here is a no-op.
//!
//! # Metric names
//!
//! These names and labels are stable; a new one may be added, none is renamed.
//!
//! | name | type | labels | what |
//! |---|---|---|---|
//! | `zk_recipes_acquire_seconds` | histogram | `kind`, `outcome` | from the call to its answer |
//! | `zk_recipes_acquires_total` | counter | `kind`, `outcome` | acquires answered |
//! | `zk_recipes_handoffs_total` | counter | `kind` | grants after waiting behind another contender |
//! | `zk_recipes_hold_seconds` | histogram | `kind` | from the grant to the release or loss |
//! | `zk_recipes_losses_total` | counter | `kind`, `reason` | holds lost (not released) |
//! | `zk_recipes_session_events_total` | counter | `state` | session manager state changes |
//! | `zk_recipes_epoch` | gauge | | the current epoch (ZooKeeper session) number |
//! | `zk_recipes_requests_total` | counter | `op` | requests sent to ZooKeeper |
//!
//! * `kind`: `lock` (fair lock), `read`, `write`, `lease` (semaphore), `latch` (election),
//!   `simple` (the exclusive-ephemeral lock).
//! * `outcome`: `granted`, `timeout`, `would_block`, `error`.
//! * `reason`: `session_expired`, `connection_lost`, `node_deleted`, `closed`.
//! * `state`: `connecting`, `connected`, `suspended`, `reconnected`, `expired`, `closed`.
//! * `op`: `create`, `delete`, `get_data`, `set_data`, `exists`, `exists_watch`,
//!   `get_data_watch`, `get_children`, `get_children_watch`, `multi`.
//!
//! # Spans
//!
//! `acquire` (fields `path`, `kind`, then `node`, `epoch`, `session_id`, `outcome` as they
//! become known), `hold` (`path`, `node`, `fencing_token`; closed at the release or loss) and
//! `release` (`path`, `node`), all at the `INFO` level under the `zk_recipes` target.

use std::time::Duration;

use crate::error::{Error, LossReason};
use crate::path::{NodeKind, NodeName};
use crate::session::SessionEvent;

/// The `kind` label of a contender node (`simple` for the exclusive lock's fixed node).
pub(crate) fn kind_of(name: &NodeName) -> &'static str {
    if name.sequence.is_none() {
        return "simple";
    }
    kind_label(name.kind)
}

pub(crate) fn kind_label(kind: NodeKind) -> &'static str {
    kind.as_str()
}

fn outcome_of<T>(result: &Result<T, Error>) -> &'static str {
    match result {
        Ok(_) => "granted",
        Err(Error::Timeout) => "timeout",
        Err(Error::WouldBlock) => "would_block",
        Err(_) => "error",
    }
}

/// An acquire of `kind` answered `result` after `waited`.
pub(crate) fn acquired<T>(kind: &'static str, result: &Result<T, Error>, waited: Duration) {
    let outcome = outcome_of(result);
    tracing::Span::current().record("outcome", outcome);
    metrics::histogram!("zk_recipes_acquire_seconds", "kind" => kind, "outcome" => outcome)
        .record(waited.as_secs_f64());
    metrics::counter!("zk_recipes_acquires_total", "kind" => kind, "outcome" => outcome)
        .increment(1);
}

/// A contender of `kind` was granted after waiting behind another.
pub(crate) fn handoff(kind: &'static str) {
    metrics::counter!("zk_recipes_handoffs_total", "kind" => kind).increment(1);
}

/// A hold of `kind` ended after `held`, lost for `reason` if it was not released.
pub(crate) fn hold_ended(kind: &'static str, held: Duration, lost: Option<LossReason>) {
    metrics::histogram!("zk_recipes_hold_seconds", "kind" => kind).record(held.as_secs_f64());
    if let Some(reason) = lost {
        let reason = match reason {
            LossReason::SessionExpired => "session_expired",
            LossReason::ConnectionLost => "connection_lost",
            LossReason::NodeDeleted => "node_deleted",
            LossReason::Closed => "closed",
        };
        metrics::counter!("zk_recipes_losses_total", "kind" => kind, "reason" => reason)
            .increment(1);
    }
}

/// The session manager published `event`.
pub(crate) fn session_event(event: &SessionEvent) {
    let state = match event {
        SessionEvent::Connecting => "connecting",
        SessionEvent::Connected { epoch, .. } => {
            metrics::gauge!("zk_recipes_epoch").set(*epoch as f64);
            "connected"
        }
        SessionEvent::Suspended { .. } => "suspended",
        SessionEvent::Reconnected { .. } => "reconnected",
        SessionEvent::Expired { .. } => "expired",
        SessionEvent::Closed => "closed",
    };
    metrics::counter!("zk_recipes_session_events_total", "state" => state).increment(1);
}

/// A request `op` was sent.
pub(crate) fn request(op: &'static str) {
    metrics::counter!("zk_recipes_requests_total", "op" => op).increment(1);
}
