//! History checker for lock / election tests.
//!
//! Record one [`Event`] per holding interval (from our own recipes or from an interop peer), then
//! run [`check`] (mutual exclusion + fencing tokens), [`check_fifo`] (fair ordering) and, for
//! semaphores, [`check_semaphore`]. Each returns a [`Report`]; call [`Report::assert_clean`].
//!
//! Timestamps are CLOCK_MONOTONIC nanoseconds ([`monotonic_ns`] here, `System.nanoTime()` in Java,
//! `time.monotonic_ns()` in Python), so events from different processes on one machine compare.
//!
//! Soundness: record `acquired_ns` AFTER the acquire call returned and `released_ns` BEFORE calling
//! release (or when told the hold was lost). The recorded interval then lies inside the real one, so
//! any overlap the checker reports is real. Intervals that only touch (`a.released_ns ==
//! b.acquired_ns`) do not overlap.
#![allow(dead_code)]

use std::fmt;

/// What an event held.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// An exclusive lock (mutex): overlaps nothing.
    Exclusive,
    /// A read (shared) lock: may overlap other reads only.
    Read,
    /// A write lock: overlaps nothing.
    Write,
    /// Leadership: may not overlap another leadership (other kinds are ignored).
    Leader,
    /// One semaphore permit: ignored by [`check`]; see [`check_semaphore`].
    Semaphore,
}

impl Kind {
    /// The kind word of the interop protocol: `lock`, `read`, `write`, `latch`, `sem`.
    pub fn from_protocol(word: &str) -> Option<Kind> {
        match word {
            "lock" | "mutex" | "exclusive" => Some(Kind::Exclusive),
            "read" => Some(Kind::Read),
            "write" => Some(Kind::Write),
            "latch" | "leader" => Some(Kind::Leader),
            "sem" | "semaphore" => Some(Kind::Semaphore),
            _ => None,
        }
    }

    pub fn protocol_word(self) -> &'static str {
        match self {
            Kind::Exclusive => "lock",
            Kind::Read => "read",
            Kind::Write => "write",
            Kind::Leader => "latch",
            Kind::Semaphore => "sem",
        }
    }

    /// Exclusive with respect to every lock kind (mutex or writer).
    pub fn is_exclusive(self) -> bool {
        matches!(self, Kind::Exclusive | Kind::Write)
    }
}

/// Do two holds of these kinds conflict when their intervals overlap?
pub fn conflicts(a: Kind, b: Kind) -> bool {
    use Kind::*;
    match (a, b) {
        (Leader, Leader) => true,
        (Leader, _) | (_, Leader) => false,
        (Semaphore, _) | (_, Semaphore) => false,
        (Read, Read) => false,
        _ => true, // Exclusive/Write against Exclusive/Read/Write
    }
}

/// One holding interval.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// Who held it (e.g. `"ours#3"`, `"curator:curator-1234"`).
    pub who: String,
    pub kind: Kind,
    /// When the holder learned it holds (after acquire returned).
    pub acquired_ns: u64,
    /// When it released (just before the release call) or was TOLD it lost the hold.
    pub released_ns: u64,
    /// Fencing token, if the recipe hands one out.
    pub token: Option<i64>,
    /// When it asked (started waiting), for FIFO checks.
    pub queued_ns: Option<u64>,
}

impl Event {
    pub fn new(who: impl Into<String>, kind: Kind, acquired_ns: u64, released_ns: u64) -> Event {
        Event {
            who: who.into(),
            kind,
            acquired_ns,
            released_ns,
            token: None,
            queued_ns: None,
        }
    }

    pub fn with_token(mut self, token: i64) -> Event {
        self.token = Some(token);
        self
    }

    pub fn with_queued(mut self, queued_ns: u64) -> Event {
        self.queued_ns = Some(queued_ns);
        self
    }

    /// Strict overlap: touching intervals do not overlap.
    pub fn overlaps(&self, other: &Event) -> bool {
        self.acquired_ns < other.released_ns && other.acquired_ns < self.released_ns
    }
}

impl fmt::Display for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {:?} [{} .. {}] ({:.3} ms)",
            self.who,
            self.kind,
            self.acquired_ns,
            self.released_ns,
            self.released_ns.saturating_sub(self.acquired_ns) as f64 / 1e6
        )?;
        if let Some(t) = self.token {
            write!(f, " token={t}")?;
        }
        if let Some(q) = self.queued_ns {
            write!(f, " queued={q}")?;
        }
        Ok(())
    }
}

/// The outcome of a check. Empty vectors = clean.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Report {
    /// Conflicting holds whose intervals overlap (or too many semaphore holders).
    pub overlaps: Vec<String>,
    /// Tokens that did not strictly increase in acquisition order.
    pub token_violations: Vec<String>,
    /// FIFO violations and malformed events (released before acquired).
    pub order_violations: Vec<String>,
}

impl Report {
    pub fn is_clean(&self) -> bool {
        self.overlaps.is_empty()
            && self.token_violations.is_empty()
            && self.order_violations.is_empty()
    }

    /// Append another report's findings.
    pub fn merge(&mut self, other: Report) -> &mut Report {
        self.overlaps.extend(other.overlaps);
        self.token_violations.extend(other.token_violations);
        self.order_violations.extend(other.order_violations);
        self
    }

    pub fn merged(mut self, other: Report) -> Report {
        self.merge(other);
        self
    }

    /// Panic with every violation listed (the first 50 of each category) unless clean.
    #[track_caller]
    pub fn assert_clean(&self, what: &str) {
        if !self.is_clean() {
            panic!("{what}: history check FAILED\n{self}");
        }
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const MAX: usize = 50;
        if self.is_clean() {
            return write!(f, "clean");
        }
        for (name, list) in [
            ("overlaps", &self.overlaps),
            ("token violations", &self.token_violations),
            ("order violations", &self.order_violations),
        ] {
            if list.is_empty() {
                continue;
            }
            writeln!(f, "{} {name}:", list.len())?;
            for v in list.iter().take(MAX) {
                writeln!(f, "  - {v}")?;
            }
            if list.len() > MAX {
                writeln!(f, "  ... and {} more", list.len() - MAX)?;
            }
        }
        Ok(())
    }
}

fn malformed(events: &[Event], report: &mut Report) {
    for (i, e) in events.iter().enumerate() {
        if e.released_ns < e.acquired_ns {
            report
                .order_violations
                .push(format!("event #{i} released before it was acquired: {e}"));
        }
    }
}

/// Mutual exclusion and fencing tokens.
///
/// * overlap: an Exclusive/Write event overlapping any Exclusive/Read/Write event, or two Leader
///   events overlapping. Semaphore events are ignored here (see [`check_semaphore`]).
/// * token violation: among events that carry a token, ordered by `acquired_ns`, every token must
///   be strictly greater than every token acquired before it. Only attach tokens to events that
///   cannot overlap one another (exclusive/write holds, leaderships), since the acquisition order of
///   overlapping readers is not meaningful.
/// * malformed events (released before acquired) go to `order_violations`.
pub fn check(events: &[Event]) -> Report {
    let mut report = Report::default();
    malformed(events, &mut report);

    // Overlaps: sweep in acquisition order; compare each event with those starting before it ends.
    let mut idx: Vec<usize> = (0..events.len()).collect();
    idx.sort_by_key(|&i| (events[i].acquired_ns, events[i].released_ns));
    for (pos, &i) in idx.iter().enumerate() {
        let a = &events[i];
        for &j in &idx[pos + 1..] {
            let b = &events[j];
            if b.acquired_ns >= a.released_ns {
                break;
            }
            if conflicts(a.kind, b.kind) && a.overlaps(b) {
                let ns = a.released_ns.min(b.released_ns) - b.acquired_ns.max(a.acquired_ns);
                report.overlaps.push(format!(
                    "#{i} {a}  OVERLAPS  #{j} {b}  (by {:.3} ms)",
                    ns as f64 / 1e6
                ));
            }
        }
    }

    // Tokens: strictly increasing in acquisition order.
    let mut tok: Vec<usize> = (0..events.len())
        .filter(|&i| events[i].token.is_some())
        .collect();
    tok.sort_by_key(|&i| (events[i].acquired_ns, events[i].token));
    let mut max: Option<usize> = None;
    for &i in &tok {
        let t = events[i].token.unwrap();
        if let Some(m) = max {
            let mt = events[m].token.unwrap();
            if t <= mt {
                report.token_violations.push(format!(
                    "#{i} {} got token {t} at {} but #{m} {} already got token {mt} at {}",
                    events[i].who, events[i].acquired_ns, events[m].who, events[m].acquired_ns
                ));
                continue;
            }
        }
        max = Some(i);
    }
    report
}

/// Fairness: for exclusive events (Exclusive or Write) that carry `queued_ns`, if `a` queued strictly
/// before `b`, `a` must be granted (`acquired_ns`) strictly before `b`. Violations go to
/// `order_violations`.
///
/// Across processes, "queued" must be a point after which the position in the queue is fixed
/// (e.g. the znode was created), not just "called acquire", or this reports false positives.
pub fn check_fifo(events: &[Event]) -> Report {
    let mut report = Report::default();
    malformed(events, &mut report);
    let mut q: Vec<usize> = (0..events.len())
        .filter(|&i| events[i].queued_ns.is_some() && events[i].kind.is_exclusive())
        .collect();
    q.sort_by_key(|&i| (events[i].queued_ns.unwrap(), events[i].acquired_ns));
    // Walk groups of equal queued_ns; `latest` = the event with the largest acquired_ns among
    // strictly earlier groups.
    let mut latest: Option<usize> = None;
    let mut g = 0;
    while g < q.len() {
        let qn = events[q[g]].queued_ns.unwrap();
        let mut end = g;
        while end < q.len() && events[q[end]].queued_ns.unwrap() == qn {
            end += 1;
        }
        for &b in &q[g..end] {
            if let Some(a) = latest {
                if events[a].acquired_ns >= events[b].acquired_ns {
                    report.order_violations.push(format!(
                        "FIFO: #{a} {} queued at {} before #{b} {} (queued at {}) but was granted at {}, not before {}",
                        events[a].who,
                        events[a].queued_ns.unwrap(),
                        events[b].who,
                        events[b].queued_ns.unwrap(),
                        events[a].acquired_ns,
                        events[b].acquired_ns
                    ));
                }
            }
        }
        for &b in &q[g..end] {
            if latest.is_none_or(|a| events[b].acquired_ns > events[a].acquired_ns) {
                latest = Some(b);
            }
        }
        g = end;
    }
    report
}

/// At most `permits` Semaphore events may overlap at any instant. Every instant with more holders
/// is reported once per excess acquisition in `overlaps`.
pub fn check_semaphore(events: &[Event], permits: usize) -> Report {
    let mut report = Report::default();
    malformed(events, &mut report);
    // (time, is_acquire, index); releases sort before acquires at the same instant.
    let mut pts: Vec<(u64, bool, usize)> = Vec::new();
    for (i, e) in events.iter().enumerate() {
        // A zero-length hold overlaps nothing; kept, its release would sort before its own
        // acquire and it would count as held for ever.
        if e.kind == Kind::Semaphore && e.released_ns > e.acquired_ns {
            pts.push((e.acquired_ns, true, i));
            pts.push((e.released_ns, false, i));
        }
    }
    pts.sort();
    let mut holding: Vec<usize> = Vec::new();
    for (t, acquire, i) in pts {
        if acquire {
            holding.push(i);
            if holding.len() > permits {
                let list: Vec<String> = holding
                    .iter()
                    .map(|&h| format!("#{h} {}", events[h]))
                    .collect();
                report.overlaps.push(format!(
                    "{} semaphore holders at {t} (permits {permits}): {}",
                    holding.len(),
                    list.join(" | ")
                ));
            }
        } else {
            holding.retain(|&h| h != i);
        }
    }
    report
}

/// `clock_gettime(CLOCK_MONOTONIC)` in nanoseconds: the clock of Java's `System.nanoTime()` and
/// Python's `time.monotonic_ns()` on Linux, so histories from peers and from this process compare.
#[cfg(all(target_os = "linux", target_pointer_width = "64"))]
pub fn monotonic_ns() -> u64 {
    #[repr(C)]
    struct Timespec {
        tv_sec: i64,
        tv_nsec: i64,
    }
    extern "C" {
        fn clock_gettime(clk_id: i32, tp: *mut Timespec) -> i32;
    }
    const CLOCK_MONOTONIC: i32 = 1; // Linux
    let mut ts = Timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid pointer to a timespec-shaped struct (64-bit Linux layout).
    let rc = unsafe { clock_gettime(CLOCK_MONOTONIC, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_MONOTONIC) failed");
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

// ---------------------------------------------------------------------------------- protocol

/// One line of the interop peers' stdout protocol (see `tests/interop/Interop.java`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InteropLine {
    /// `READY`: connected.
    Ready,
    /// `REQ <ns> <kind> <id>`: about to call acquire.
    Req { ns: u64, kind: Kind, id: String },
    /// `ACQ <ns> <kind> <id> <node-or-->`: acquired; `node` is the held znode's name if known.
    Acq {
        ns: u64,
        kind: Kind,
        id: String,
        node: Option<String>,
    },
    /// `REL <ns> <kind> <id> [lost]`: about to release, or (`lost`) the hold is no longer trusted.
    Rel {
        ns: u64,
        kind: Kind,
        id: String,
        lost: bool,
    },
    /// `ERR <message>`.
    Err(String),
    /// `DONE`.
    Done,
    /// `REVOKED`: a revocable Curator holder was asked to let go (it releases next).
    Revoked,
    /// `REVOKE-SENT`: Curator's `Revoker.attemptRevoke` wrote its request.
    RevokeSent,
    /// `NODE <name> <owner> <data>` (kazoo_interop.py `list` mode).
    Node { name: String, rest: String },
}

/// Parse one protocol line; `None` for anything else (blank lines, stray output).
pub fn parse_interop_line(line: &str) -> Option<InteropLine> {
    let line = line.trim_end_matches(['\r', '\n']);
    let mut it = line.split_whitespace();
    let tag = it.next()?;
    match tag {
        "READY" => Some(InteropLine::Ready),
        "DONE" => Some(InteropLine::Done),
        "REVOKED" => Some(InteropLine::Revoked),
        "REVOKE-SENT" => Some(InteropLine::RevokeSent),
        "ERR" => Some(InteropLine::Err(
            line.get(3..).unwrap_or("").trim().to_string(),
        )),
        "REQ" | "ACQ" | "REL" => {
            let ns: u64 = it.next()?.parse().ok()?;
            let kind = Kind::from_protocol(it.next()?)?;
            let id = it.next()?.to_string();
            match tag {
                "REQ" => Some(InteropLine::Req { ns, kind, id }),
                "ACQ" => {
                    let node = match it.next() {
                        None | Some("-") => None,
                        Some(n) => Some(n.to_string()),
                    };
                    Some(InteropLine::Acq { ns, kind, id, node })
                }
                _ => Some(InteropLine::Rel {
                    ns,
                    kind,
                    id,
                    lost: it.next() == Some("lost"),
                }),
            }
        }
        "NODE" => {
            let name = it.next()?.to_string();
            let rest = line.splitn(3, ' ').nth(2).unwrap_or("").to_string();
            Some(InteropLine::Node { name, rest })
        }
        _ => None,
    }
}

/// The ZooKeeper sequence number at the end of a sequential node name
/// (`_c_…-lock-0000000003` → 3, `…__lock__0000000001` → 1). Needs at least 10 trailing digits.
pub fn node_sequence(name: &str) -> Option<i64> {
    let name = name.rsplit('/').next().unwrap_or(name);
    let digits = name
        .bytes()
        .rev()
        .take_while(|b| b.is_ascii_digit())
        .count();
    if digits < 10 {
        return None;
    }
    name[name.len() - digits..].parse().ok()
}

/// (id, kind, acquired_ns, queued_ns, node) of an ACQ still waiting for its REL.
type OpenHold = (String, Kind, u64, Option<u64>, Option<String>);

/// Turns a stream of protocol lines from one peer into events.
#[derive(Debug, Default, Clone)]
pub struct LineCollector {
    /// Prefix for `Event::who` (`"{label}:{id}"`); empty = just the id.
    pub label: String,
    pub events: Vec<Event>,
    /// The node name reported by each event's ACQ line (parallel to `events`).
    pub nodes: Vec<Option<String>>,
    /// Whether each event ended with `REL … lost` (parallel to `events`).
    pub lost: Vec<bool>,
    pub errors: Vec<String>,
    pub ready: bool,
    pub done: bool,
    /// ACQ lines still waiting for their REL: id → (kind, acquired_ns, queued_ns, node).
    open: Vec<OpenHold>,
    /// REQ lines waiting for their ACQ: id → ns.
    queued: Vec<(String, u64)>,
}

impl LineCollector {
    pub fn new(label: &str) -> LineCollector {
        LineCollector {
            label: label.to_string(),
            ..Default::default()
        }
    }

    fn who(&self, id: &str) -> String {
        if self.label.is_empty() {
            id.to_string()
        } else {
            format!("{}:{id}", self.label)
        }
    }

    /// Feed one line. Unknown lines are ignored.
    pub fn feed(&mut self, line: &str) {
        match parse_interop_line(line) {
            Some(InteropLine::Ready) => self.ready = true,
            Some(InteropLine::Done) => self.done = true,
            Some(InteropLine::Revoked | InteropLine::RevokeSent) => {}
            Some(InteropLine::Err(m)) => self.errors.push(m),
            Some(InteropLine::Req { ns, id, .. }) => {
                self.queued.retain(|(q, _)| *q != id);
                self.queued.push((id, ns));
            }
            Some(InteropLine::Acq { ns, kind, id, node }) => {
                let q = self
                    .queued
                    .iter()
                    .position(|(q, _)| *q == id)
                    .map(|p| self.queued.remove(p).1);
                if self.open.iter().any(|o| o.0 == id) {
                    self.errors.push(format!(
                        "ACQ for {id} while it still holds (no REL in between): {line}"
                    ));
                }
                self.open.push((id, kind, ns, q, node));
            }
            Some(InteropLine::Rel { ns, kind, id, lost }) => {
                match self.open.iter().position(|o| o.0 == id && o.1 == kind) {
                    Some(p) => {
                        let (id, kind, acq, q, node) = self.open.remove(p);
                        let mut e = Event::new(self.who(&id), kind, acq, ns);
                        e.queued_ns = q;
                        self.events.push(e);
                        self.nodes.push(node);
                        self.lost.push(lost);
                    }
                    None => self.errors.push(format!("REL without ACQ: {line}")),
                }
            }
            Some(InteropLine::Node { .. }) | None => {}
        }
    }

    /// Close the stream: holds without a REL are closed at `end_ns` (a process that died while
    /// holding is treated as holding until then) and reported as errors.
    pub fn finish(&mut self, end_ns: u64) {
        for (id, kind, acq, q, node) in std::mem::take(&mut self.open) {
            self.errors.push(format!(
                "{id} acquired {kind:?} at {acq} and never printed REL"
            ));
            let mut e = Event::new(self.who(&id), kind, acq, end_ns.max(acq));
            e.queued_ns = q;
            self.events.push(e);
            self.nodes.push(node);
            self.lost.push(true);
        }
    }

    /// Events with `token` = the sequence number of the node each one held, for exclusive kinds
    /// (Exclusive/Write). For ZooKeeper's fair queue recipes the grant order of exclusive holders is
    /// the sequence order, so [`check`] then verifies fair ordering across peers too.
    pub fn events_with_seq_tokens(&self) -> Vec<Event> {
        self.events
            .iter()
            .zip(&self.nodes)
            .map(|(e, n)| {
                let mut e = e.clone();
                if e.kind.is_exclusive() {
                    e.token = n.as_deref().and_then(node_sequence);
                }
                e
            })
            .collect()
    }
}

// ---------------------------------------------------------------------------------- tests

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(who: &str, kind: Kind, a: u64, r: u64) -> Event {
        Event::new(who, kind, a, r)
    }

    #[test]
    fn clean_history_is_clean() {
        let h = vec![
            ev("a", Kind::Exclusive, 0, 10).with_token(1),
            ev("b", Kind::Exclusive, 10, 20).with_token(2), // touching is fine
            ev("c", Kind::Exclusive, 25, 30).with_token(5),
        ];
        let r = check(&h);
        assert!(r.is_clean(), "{r}");
        r.assert_clean("clean");
    }

    #[test]
    fn catches_exclusive_overlap() {
        let h = vec![
            ev("a", Kind::Exclusive, 0, 10),
            ev("b", Kind::Exclusive, 9, 20),
        ];
        let r = check(&h);
        assert_eq!(r.overlaps.len(), 1, "{r}");
        assert!(r.overlaps[0].contains("a") && r.overlaps[0].contains("b"));
    }

    #[test]
    fn catches_overlap_hidden_behind_long_event() {
        // a long hold covering two later ones: both must be reported
        let h = vec![
            ev("long", Kind::Exclusive, 0, 100),
            ev("x", Kind::Exclusive, 10, 20),
            ev("y", Kind::Exclusive, 50, 60),
        ];
        assert_eq!(check(&h).overlaps.len(), 2);
    }

    #[test]
    fn read_write_rules() {
        let rr = vec![ev("r1", Kind::Read, 0, 10), ev("r2", Kind::Read, 5, 15)];
        assert!(check(&rr).is_clean());
        let rw = vec![ev("r1", Kind::Read, 0, 10), ev("w", Kind::Write, 5, 15)];
        assert_eq!(check(&rw).overlaps.len(), 1);
        let ww = vec![ev("w1", Kind::Write, 0, 10), ev("w2", Kind::Write, 5, 15)];
        assert_eq!(check(&ww).overlaps.len(), 1);
        let wr_inside = vec![ev("w", Kind::Write, 0, 100), ev("r", Kind::Read, 40, 41)];
        assert_eq!(check(&wr_inside).overlaps.len(), 1);
        let xr = vec![ev("x", Kind::Exclusive, 0, 10), ev("r", Kind::Read, 5, 6)];
        assert_eq!(check(&xr).overlaps.len(), 1);
    }

    #[test]
    fn leader_rules() {
        let ll = vec![ev("l1", Kind::Leader, 0, 10), ev("l2", Kind::Leader, 3, 4)];
        assert_eq!(check(&ll).overlaps.len(), 1);
        let lx = vec![
            ev("l1", Kind::Leader, 0, 10),
            ev("x", Kind::Exclusive, 3, 4),
        ];
        assert!(check(&lx).is_clean());
    }

    #[test]
    fn catches_token_not_increasing() {
        let h = vec![
            ev("a", Kind::Exclusive, 0, 10).with_token(5),
            ev("b", Kind::Exclusive, 10, 20).with_token(5), // equal: violation
            ev("c", Kind::Exclusive, 20, 30).with_token(4), // smaller: violation
            ev("d", Kind::Exclusive, 30, 40).with_token(6),
            ev("e", Kind::Exclusive, 40, 50), // no token: ignored
        ];
        let r = check(&h);
        assert!(r.overlaps.is_empty(), "{r}");
        assert_eq!(r.token_violations.len(), 2, "{r}");
        // order of the input must not matter
        let mut rev = h.clone();
        rev.reverse();
        assert_eq!(check(&rev).token_violations.len(), 2);
    }

    #[test]
    fn token_running_max() {
        // 1, 100, 3, 4: both 3 and 4 are below an earlier token
        let h = vec![
            ev("a", Kind::Exclusive, 0, 1).with_token(1),
            ev("b", Kind::Exclusive, 2, 3).with_token(100),
            ev("c", Kind::Exclusive, 4, 5).with_token(3),
            ev("d", Kind::Exclusive, 6, 7).with_token(4),
        ];
        assert_eq!(check(&h).token_violations.len(), 2);
    }

    #[test]
    fn catches_malformed_event() {
        let h = vec![ev("a", Kind::Exclusive, 10, 5)];
        assert_eq!(check(&h).order_violations.len(), 1);
    }

    #[test]
    fn fifo() {
        let ok = vec![
            ev("a", Kind::Exclusive, 10, 20).with_queued(0),
            ev("b", Kind::Exclusive, 20, 30).with_queued(1),
            ev("c", Kind::Write, 30, 40).with_queued(2),
        ];
        assert!(check_fifo(&ok).is_clean());
        let bad = vec![
            ev("a", Kind::Exclusive, 20, 30).with_queued(0),
            ev("b", Kind::Exclusive, 10, 20).with_queued(1), // queued later, granted earlier
        ];
        let r = check_fifo(&bad);
        assert_eq!(r.order_violations.len(), 1, "{r}");
        assert!(r.order_violations[0].contains("FIFO"));
        // equal queue times: no order required
        let tie = vec![
            ev("a", Kind::Exclusive, 20, 30).with_queued(5),
            ev("b", Kind::Exclusive, 10, 20).with_queued(5),
        ];
        assert!(check_fifo(&tie).is_clean());
        // reads and events without queued_ns are not checked
        let reads = vec![
            ev("a", Kind::Read, 20, 30).with_queued(0),
            ev("b", Kind::Read, 10, 20).with_queued(1),
            ev("c", Kind::Exclusive, 0, 5),
        ];
        assert!(check_fifo(&reads).is_clean());
        // violation against a non-adjacent earlier waiter
        let far = vec![
            ev("a", Kind::Exclusive, 50, 60).with_queued(0),
            ev("b", Kind::Exclusive, 10, 20).with_queued(1),
            ev("c", Kind::Exclusive, 20, 30).with_queued(2),
        ];
        assert_eq!(check_fifo(&far).order_violations.len(), 2);
    }

    #[test]
    fn semaphore_permits() {
        let h = vec![
            ev("a", Kind::Semaphore, 0, 10),
            ev("b", Kind::Semaphore, 5, 15),
            ev("c", Kind::Semaphore, 10, 20), // a released at 10: still 2
        ];
        assert!(check_semaphore(&h, 2).is_clean());
        assert_eq!(check_semaphore(&h, 1).overlaps.len(), 2);
        let three = vec![
            ev("a", Kind::Semaphore, 0, 10),
            ev("b", Kind::Semaphore, 1, 10),
            ev("c", Kind::Semaphore, 2, 10),
        ];
        assert_eq!(check_semaphore(&three, 2).overlaps.len(), 1);
        // check() ignores semaphore events
        assert!(check(&three).is_clean());
        // A zero-length hold is not held for ever.
        let instant = vec![
            ev("a", Kind::Semaphore, 5, 5),
            ev("b", Kind::Semaphore, 6, 10),
            ev("c", Kind::Semaphore, 7, 10),
        ];
        assert!(check_semaphore(&instant, 2).is_clean());
    }

    #[test]
    #[should_panic(expected = "history check FAILED")]
    fn assert_clean_panics() {
        check(&[ev("a", Kind::Write, 0, 10), ev("b", Kind::Write, 1, 2)])
            .assert_clean("two writers");
    }

    #[test]
    fn parse_lines() {
        assert_eq!(parse_interop_line("READY"), Some(InteropLine::Ready));
        assert_eq!(parse_interop_line("DONE\n"), Some(InteropLine::Done));
        assert_eq!(
            parse_interop_line("ERR KeeperException: boom x"),
            Some(InteropLine::Err("KeeperException: boom x".into()))
        );
        assert_eq!(
            parse_interop_line("ACQ 123 lock c1 _c_9cf0-lock-0000000009"),
            Some(InteropLine::Acq {
                ns: 123,
                kind: Kind::Exclusive,
                id: "c1".into(),
                node: Some("_c_9cf0-lock-0000000009".into())
            })
        );
        assert_eq!(
            parse_interop_line("ACQ 5 latch L -"),
            Some(InteropLine::Acq {
                ns: 5,
                kind: Kind::Leader,
                id: "L".into(),
                node: None
            })
        );
        assert_eq!(
            parse_interop_line("REL 7 write w lost"),
            Some(InteropLine::Rel {
                ns: 7,
                kind: Kind::Write,
                id: "w".into(),
                lost: true
            })
        );
        assert_eq!(
            parse_interop_line("REL 7 sem s"),
            Some(InteropLine::Rel {
                ns: 7,
                kind: Kind::Semaphore,
                id: "s".into(),
                lost: false
            })
        );
        assert_eq!(
            parse_interop_line("REQ 1 read r"),
            Some(InteropLine::Req {
                ns: 1,
                kind: Kind::Read,
                id: "r".into()
            })
        );
        assert_eq!(parse_interop_line("ACQ x lock a b"), None);
        assert_eq!(parse_interop_line("ACQ 1 bogus a b"), None);
        assert_eq!(parse_interop_line("SLF4J: whatever"), None);
        assert_eq!(parse_interop_line(""), None);
    }

    #[test]
    fn node_sequences() {
        assert_eq!(
            node_sequence("_c_02606957-07a0-45d2-b422-97739cdfe9d7-lock-0000000002"),
            Some(2)
        );
        assert_eq!(
            node_sequence("fbb61b4b879b477ea5b08240db24ca7b__lock__0000000011"),
            Some(11)
        );
        assert_eq!(node_sequence("/a/b/x-0000000123"), Some(123));
        assert_eq!(node_sequence("6c615bb1aad14b2e8919262a408740af"), None);
        assert_eq!(node_sequence("lock-12"), None);
    }

    #[test]
    fn collector_builds_events_and_catches_overlap() {
        let mut c1 = LineCollector::new("curator");
        for l in [
            "READY",
            "REQ 1 lock c1",
            "ACQ 10 lock c1 _c_x-lock-0000000001",
            "REL 20 lock c1",
            "DONE",
        ] {
            c1.feed(l);
        }
        c1.finish(100);
        assert!(c1.ready && c1.done && c1.errors.is_empty());
        assert_eq!(
            c1.events,
            vec![Event::new("curator:c1", Kind::Exclusive, 10, 20).with_queued(1)]
        );
        let mut c2 = LineCollector::new("kazoo");
        for l in ["READY", "ACQ 15 lock k1 abc__lock__0000000000"] {
            c2.feed(l);
        }
        c2.finish(30); // died holding: closed at 30, reported
        assert_eq!(c2.errors.len(), 1);
        assert!(!c2.done);
        let mut all = c1.events_with_seq_tokens();
        all.extend(c2.events_with_seq_tokens());
        let r = check(&all);
        assert_eq!(r.overlaps.len(), 1, "{r}");
        // tokens: seq 1 at t=10, seq 0 at t=15 -> violation
        assert_eq!(r.token_violations.len(), 1, "{r}");
        let mut bad = LineCollector::new("");
        bad.feed("REL 5 lock zz");
        assert_eq!(bad.errors.len(), 1);
    }

    #[test]
    fn monotonic_clock_moves() {
        let a = monotonic_ns();
        let b = monotonic_ns();
        assert!(a > 0 && b >= a);
    }
}
