//! The dummynet-style scheduler test harness: a packet generator and a
//! fill/drain controller that drive one [`Scheduler`] alone, with no threads
//! and no link, to measure the cost of an enqueue/dequeue pair.
//!
//! After the userspace harness of dummynet (FreeBSD
//! `sys/netpfil/ipfw/test/main.c`), as described in Rizzo's talk "Packet
//! scheduling in dummynet" ("Test harness").
//!
//! # The controller
//! Each iteration either enqueues one packet or dequeues one, never both:
//! * in the *fill* state it enqueues to the flow with the **smallest
//!   backlog** (packets held by the scheduler). Flows sit on one list per
//!   backlog level 0..=31 (level 31 means "31 or more") and a 32-bit mask
//!   marks the non-empty lists, so the choice is one `trailing_zeros` (ffs)
//!   and an O(1) list move; ties go round robin (a flow joins the tail of
//!   its new level);
//! * when the scheduler holds `qmax` packets it switches to *drain* and
//!   dequeues until it holds `qmin` or fewer, then fills again.
//!
//! Packets are precomputed per flow (flow id and length), so generating one
//! costs a table read. [`Harness::run`] reads no clock: the caller times it
//! and divides by the enqueues, as the reference harness does ("ns per
//! pair", generator and controller included). The `now` given to the
//! scheduler is the iteration number.
//!
//! # Flowsets
//! [`Flowsets::parse`] reads the talk's `-flowsets` syntax, a comma-separated
//! list of items `w:len:flows`, optionally with ranges:
//! `w:wmax:wsteps:len:lmax:lsteps:flows` (7 fields), or a range written
//! inside one field as `lo-hi-steps` (the FreeBSD form, e.g.
//! `1-8-4:1500:16`). A range yields `steps` values interpolated from lo to hi
//! (integer division, as the reference); an item with a weight range of m
//! steps and a length range of n steps yields m×n flowsets of `flows` flows
//! each. Five fields are ambiguous and refused. Empty fields take defaults:
//! weight 1, length 1000 bytes (the reference's default), flows 1; a range
//! with an empty step count has 2 steps (1 if lo = hi). Numbers accept the
//! suffixes K (10³), M (10⁶), k (2¹⁰) and m (2²⁰): `1::32k` is 32768 flows of
//! weight 1 and 1000-byte packets. Weights are 1..=65536, lengths
//! 1..=65535, at most 2²⁴ flows in all.
//!
//! # Complexity
//! O(1) per iteration plus the scheduler's cost; memory O(flows).
//!
//! # Example
//! ```
//! use pspat_eval::harness::{Flowsets, Harness};
//! use pspat_sched::{AlgKind, SchedulerConfig};
//! let fs = Flowsets::parse("1::8,4:1500:2").unwrap();
//! assert_eq!(fs.flows(), 10);
//! let mut cfg = SchedulerConfig::new(AlgKind::Drr);
//! cfg.capacity = 200;
//! let sched = cfg.build(fs.flow_table().unwrap()).unwrap();
//! let mut h = Harness::new(sched, &fs, 10, 200).unwrap();
//! let stats = h.run(10_000);
//! assert_eq!(stats.enqueues + stats.dequeues, 10_000);
//! assert_eq!(stats.drops, 0);
//! ```

use pspat_sched::{
    ConfigError, FlowId, FlowParams, FlowTable, Instant, Packet, Scheduler, MAX_PACKET_LEN,
    MAX_WEIGHT, MIN_WEIGHT,
};

/// Packet length of a flowset whose length field is empty (bytes).
pub const DEFAULT_LEN: u32 = 1000;

/// Backlog levels tracked by their own list; the last holds every flow with
/// at least `LEVELS - 1` packets.
const LEVELS: usize = 32;
const NIL: u32 = u32::MAX;

/// One flowset after range expansion: `flows` flows of one weight and length.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Flowset {
    /// Weight of each flow, 1..=65536.
    pub weight: u32,
    /// Packet length (and lmax) of each flow, 1..=65535 bytes.
    pub len: u32,
    /// Number of flows.
    pub flows: u32,
}

/// A parsed `--flowsets` specification.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Flowsets {
    sets: Vec<Flowset>,
    flows: usize,
}

/// Parses a count with the harness's suffixes: K (10³), M (10⁶), k (2¹⁰),
/// m (2²⁰), and, when `per_flow` is given, n (× that many flows).
///
/// # Errors
/// Empty or non-numeric text, an unknown suffix, or overflow; the message
/// names `what`.
///
/// # Examples
/// ```
/// use pspat_eval::harness::parse_count;
/// assert_eq!(parse_count("32k", "flows", None).unwrap(), 32_768);
/// assert_eq!(parse_count("2M", "iterations", None).unwrap(), 2_000_000);
/// assert_eq!(parse_count("20n", "qmax", Some(100)).unwrap(), 2_000);
/// assert!(parse_count("20n", "flows", None).is_err());
/// assert!(parse_count("x", "flows", None).is_err());
/// ```
pub fn parse_count(text: &str, what: &str, per_flow: Option<u64>) -> Result<u64, ConfigError> {
    let t = text.trim();
    let digits_end = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (digits, suffix) = t.split_at(digits_end);
    let bad = |reason: &str| {
        ConfigError::invalid(
            format!("{what} {t:?}"),
            format!(
                "{reason}; expected digits with an optional suffix K (10^3), M (10^6), k (2^10), m (2^20){}",
                if per_flow.is_some() { " or n (x flows)" } else { "" }
            ),
        )
    };
    if digits.is_empty() {
        return Err(bad("not a number"));
    }
    let value: u64 = digits.parse().map_err(|_| bad("too large"))?;
    let mult = match (suffix, per_flow) {
        ("", _) => 1,
        ("K", _) => 1_000,
        ("M", _) => 1_000_000,
        ("k", _) => 1 << 10,
        ("m", _) => 1 << 20,
        ("n", Some(n)) => n,
        _ => return Err(bad(&format!("unknown suffix {suffix:?}"))),
    };
    value.checked_mul(mult).ok_or_else(|| bad("too large"))
}

/// A field: a value, or a `lo-hi-steps` range, or empty (the default).
fn parse_range(
    text: &str,
    what: &str,
    default: u64,
) -> Result<(u64, u64, Option<u64>), ConfigError> {
    let parts: Vec<&str> = text.split('-').collect();
    let num = |s: &str, d: u64| {
        if s.trim().is_empty() {
            Ok(d)
        } else {
            parse_count(s, what, None)
        }
    };
    match parts.as_slice() {
        [v] => {
            let v = num(v, default)?;
            Ok((v, v, Some(1)))
        }
        [lo, hi, steps] => {
            let lo = num(lo, default)?;
            let hi = num(hi, lo)?;
            let steps = if steps.trim().is_empty() {
                None
            } else {
                Some(parse_count(steps, &format!("{what} steps"), None)?)
            };
            Ok((lo, hi, steps))
        }
        _ => Err(ConfigError::invalid(
            format!("{what} {text:?}"),
            "expected a number or a range lo-hi-steps",
        )),
    }
}

/// Checks a range and expands it into its interpolated values.
fn expand(
    item: &str,
    what: &str,
    (lo, hi, steps): (u64, u64, Option<u64>),
    min: u64,
    max: u64,
) -> Result<Vec<u32>, ConfigError> {
    for v in [lo, hi] {
        ConfigError::check_range(format!("flowset {item:?} {what}"), v, min..=max)?;
    }
    if hi < lo {
        return Err(ConfigError::invalid(
            format!("flowset {item:?} {what}"),
            format!("range {lo}..{hi} is decreasing; write the smaller value first"),
        ));
    }
    let steps = steps.unwrap_or(if hi == lo { 1 } else { 2 });
    ConfigError::check_range(format!("flowset {item:?} {what} steps"), steps, 1..=65_536)?;
    let div = (steps - 1).max(1);
    Ok((0..steps)
        .map(|i| (lo + (hi - lo) * i / div) as u32)
        .collect())
}

impl Flowsets {
    /// Parses a flowset specification (syntax in the module docs).
    ///
    /// # Errors
    /// An empty specification or item, a malformed or ambiguous item, a
    /// weight outside 1..=65536, a length outside 1..=65535, zero flows, or
    /// more than 2²⁴ flows in all; the message names the item and the range.
    ///
    /// # Examples
    /// ```
    /// use pspat_eval::harness::{Flowset, Flowsets};
    /// let fs = Flowsets::parse("1::512,8::64").unwrap();
    /// assert_eq!(fs.sets()[1], Flowset { weight: 8, len: 1000, flows: 64 });
    /// let r = Flowsets::parse("1:4:4:1500:1500:1:2").unwrap();
    /// assert_eq!(r.sets().iter().map(|s| s.weight).collect::<Vec<_>>(), [1, 2, 3, 4]);
    /// assert!(Flowsets::parse("").is_err());
    /// assert!(Flowsets::parse("0::4").is_err());
    /// ```
    pub fn parse(spec: &str) -> Result<Self, ConfigError> {
        if spec.trim().is_empty() {
            return Err(ConfigError::invalid(
                "flowsets",
                "empty: give items weight:len:flows, e.g. 1::512,8::64",
            ));
        }
        let mut sets = Vec::new();
        let mut flows: u64 = 0;
        for item in spec.split(',') {
            let item = item.trim();
            if item.is_empty() {
                return Err(ConfigError::invalid(
                    format!("flowsets {spec:?}"),
                    "empty item between commas",
                ));
            }
            let f: Vec<&str> = item.split(':').collect();
            let (w, l, n) = match f.as_slice() {
                [w, l, n] => (
                    parse_range(w, "weight", 1)?,
                    parse_range(l, "len", u64::from(DEFAULT_LEN))?,
                    *n,
                ),
                [w, wmax, ws, l, lmax, ls, n] => {
                    let w = parse_range(&format!("{w}-{wmax}-{ws}"), "weight", 1)?;
                    let l = parse_range(
                        &format!("{l}-{lmax}-{ls}"),
                        "len",
                        u64::from(DEFAULT_LEN),
                    )?;
                    (w, l, *n)
                }
                [_, _, _, _, _] => {
                    return Err(ConfigError::invalid(
                        format!("flowset {item:?}"),
                        "5 fields are ambiguous: use w:wmax:wsteps:len:lmax:lsteps:flows, or ranges lo-hi-steps inside a field",
                    ))
                }
                _ => {
                    return Err(ConfigError::invalid(
                        format!("flowset {item:?}"),
                        "expected weight:len:flows (3 fields) or w:wmax:wsteps:len:lmax:lsteps:flows (7 fields)",
                    ))
                }
            };
            let weights = expand(
                item,
                "weight",
                w,
                u64::from(MIN_WEIGHT),
                u64::from(MAX_WEIGHT),
            )?;
            let lens = expand(item, "len", l, 1, u64::from(MAX_PACKET_LEN))?;
            let count = if n.trim().is_empty() {
                1
            } else {
                parse_count(n, &format!("flowset {item:?} flows"), None)?
            };
            let max = FlowTable::MAX_FLOWS as u64;
            ConfigError::check_range(format!("flowset {item:?} flows"), count, 1..=max)?;
            for &weight in &weights {
                for &len in &lens {
                    flows += count;
                    if flows > max {
                        return Err(ConfigError::out_of_range(
                            "total flows of all flowsets",
                            flows,
                            format!("1..={max}"),
                        ));
                    }
                    sets.push(Flowset {
                        weight,
                        len,
                        flows: count as u32,
                    });
                }
            }
        }
        Ok(Flowsets {
            sets,
            flows: flows as usize,
        })
    }

    /// The flowsets after range expansion, in order.
    pub fn sets(&self) -> &[Flowset] {
        &self.sets
    }

    /// Total number of flows; flow ids are numbered flowset by flowset.
    pub fn flows(&self) -> usize {
        self.flows
    }

    /// Parameters of every flow (weight, lmax = the flowset's length).
    pub fn flow_params(&self) -> Vec<FlowParams> {
        let mut v = Vec::with_capacity(self.flows);
        for s in &self.sets {
            let p = FlowParams {
                weight: s.weight,
                lmax: s.len,
                priority: 0,
            };
            v.extend(std::iter::repeat_n(p, s.flows as usize));
        }
        v
    }

    /// The validated flow table of [`Flowsets::flow_params`].
    ///
    /// # Errors
    /// None for a parsed specification (kept for the table's own checks).
    pub fn flow_table(&self) -> Result<FlowTable, ConfigError> {
        FlowTable::new(self.flow_params())
    }
}

/// Counters of a [`Harness`] since construction.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RunStats {
    /// Packets offered to the scheduler.
    pub enqueues: u64,
    /// Dequeue calls.
    pub dequeues: u64,
    /// Offered packets the scheduler refused.
    pub drops: u64,
    /// Dequeue calls that returned nothing.
    pub empty_dequeues: u64,
}

impl RunStats {
    /// The counts since `earlier`, a snapshot of the same harness.
    ///
    /// ```
    /// use pspat_eval::harness::RunStats;
    /// let a = RunStats { enqueues: 5, dequeues: 4, drops: 1, empty_dequeues: 0 };
    /// let b = RunStats { enqueues: 9, dequeues: 9, drops: 1, empty_dequeues: 2 };
    /// assert_eq!(b.since(&a), RunStats { enqueues: 4, dequeues: 5, drops: 0, empty_dequeues: 2 });
    /// ```
    pub fn since(&self, earlier: &RunStats) -> RunStats {
        RunStats {
            enqueues: self.enqueues - earlier.enqueues,
            dequeues: self.dequeues - earlier.dequeues,
            drops: self.drops - earlier.drops,
            empty_dequeues: self.empty_dequeues - earlier.empty_dequeues,
        }
    }
}

/// The fill/drain controller around one scheduler.
pub struct Harness<S> {
    sched: S,
    /// Everything the controller keeps per flow, in one 16-byte slot so a
    /// step touches one cache line per flow.
    slots: Box<[Slot]>,
    head: [u32; LEVELS],
    tail: [u32; LEVELS],
    mask: u32,
    qmin: u64,
    qmax: u64,
    pending: u64,
    draining: bool,
    iteration: u64,
    stats: RunStats,
}

impl<S: Scheduler> Harness<S> {
    /// Drives `sched`, configured with `flowsets`' flows, keeping between
    /// `qmin` and `qmax` packets queued in all.
    ///
    /// # Errors
    /// `qmax` of zero or not above `qmin`, or a scheduler already holding
    /// packets.
    pub fn new(sched: S, flowsets: &Flowsets, qmin: u64, qmax: u64) -> Result<Self, ConfigError> {
        if qmax == 0 || qmax <= qmin {
            return Err(ConfigError::invalid(
                "qmin/qmax",
                format!("need 0 <= qmin < qmax and qmax >= 1, got qmin {qmin}, qmax {qmax}"),
            ));
        }
        if !sched.is_empty() {
            return Err(ConfigError::invalid(
                "harness scheduler",
                "must start empty",
            ));
        }
        let n = flowsets.flows();
        let slots: Box<[Slot]> = flowsets
            .flow_params()
            .iter()
            .map(|p| Slot {
                next: NIL,
                prev: NIL,
                backlog: 0,
                len: p.lmax,
            })
            .collect();
        let mut h = Harness {
            sched,
            slots,
            head: [NIL; LEVELS],
            tail: [NIL; LEVELS],
            mask: 0,
            qmin,
            qmax,
            pending: 0,
            draining: false,
            iteration: 0,
            stats: RunStats::default(),
        };
        for f in 0..n as u32 {
            h.push_tail(0, f);
        }
        Ok(h)
    }

    /// Runs `iterations` controller steps; returns the counters since
    /// construction.
    ///
    /// The steps run in batches of one kind: while filling, the controller
    /// cannot reach `qmax` sooner than `qmax - pending` steps (each step adds
    /// at most one packet), and while draining it cannot reach `qmin` sooner
    /// than `pending - qmin` steps, so the state test of every step is made
    /// once per batch. Each batch keeps the counters in locals; the sequence
    /// of enqueues and dequeues is exactly that of testing every step.
    pub fn run(&mut self, iterations: u64) -> RunStats {
        let mut left = iterations;
        while left > 0 {
            if self.draining {
                if self.pending <= self.qmin {
                    self.draining = false;
                    continue;
                }
                let n = left.min(self.pending - self.qmin);
                self.drain_batch(n);
                left -= n;
            } else {
                if self.pending >= self.qmax {
                    self.draining = true;
                    continue;
                }
                let n = left.min(self.qmax - self.pending);
                self.fill_batch(n);
                left -= n;
            }
        }
        self.stats
    }

    /// The counters since construction.
    pub fn stats(&self) -> RunStats {
        self.stats
    }

    /// Packets the controller believes are queued.
    pub fn pending(&self) -> u64 {
        self.pending
    }

    /// The scheduler under test.
    pub fn scheduler(&self) -> &S {
        &self.sched
    }

    /// `n` fill steps: each enqueues one packet to the flow at the head of
    /// the lowest non-empty backlog level.
    fn fill_batch(&mut self, n: u64) {
        let mut it = self.iteration;
        let mut enq = self.stats.enqueues;
        let mut drops = self.stats.drops;
        let mut pending = self.pending;
        for _ in 0..n {
            it += 1;
            // ffs: the lowest non-empty backlog level. Every flow is on some
            // list, so the mask is never zero.
            let lvl = self.mask.trailing_zeros() as usize;
            let f = self.head[lvl];
            let slot = self.slots[f as usize];
            let pkt = Packet::new(FlowId(f), slot.len, enq);
            enq += 1;
            match self.sched.enqueue(Instant::from_nanos(it), pkt) {
                Ok(()) => {
                    pending += 1;
                    self.slots[f as usize].backlog = slot.backlog + 1;
                    // Leave the head: to the next level, or to the tail of
                    // the last one (round robin among the full).
                    self.pop_head(lvl, slot.next);
                    self.push_tail(level(slot.backlog + 1), f);
                }
                Err(_) => drops += 1,
            }
        }
        self.iteration = it;
        self.stats.enqueues = enq;
        self.stats.drops = drops;
        self.pending = pending;
    }

    /// `n` drain steps: each dequeues once and moves the packet's flow down
    /// one backlog level.
    fn drain_batch(&mut self, n: u64) {
        let mut it = self.iteration;
        let mut empty = self.stats.empty_dequeues;
        let mut pending = self.pending;
        for _ in 0..n {
            it += 1;
            match self.sched.dequeue(Instant::from_nanos(it)) {
                Some(pkt) => {
                    let f = pkt.flow.0;
                    let old = self.slots[f as usize].backlog;
                    self.slots[f as usize].backlog = old - 1;
                    pending -= 1;
                    // Below the last level every packet changes the level.
                    if (old as usize) < LEVELS {
                        self.unlink(old as usize, f);
                        self.push_tail(old as usize - 1, f);
                    }
                }
                None => empty += 1,
            }
        }
        self.stats.dequeues += n;
        self.iteration = it;
        self.stats.empty_dequeues = empty;
        self.pending = pending;
    }

    /// Removes the head of level `lvl`, whose successor is `next`.
    #[inline(always)]
    fn pop_head(&mut self, lvl: usize, next: u32) {
        self.head[lvl] = next;
        if next == NIL {
            self.tail[lvl] = NIL;
            self.mask &= !(1 << lvl);
        } else {
            self.slots[next as usize].prev = NIL;
        }
    }

    #[inline(always)]
    fn push_tail(&mut self, lvl: usize, f: u32) {
        let t = self.tail[lvl];
        self.slots[f as usize].prev = t;
        self.slots[f as usize].next = NIL;
        if t == NIL {
            self.head[lvl] = f;
            self.mask |= 1 << lvl;
        } else {
            self.slots[t as usize].next = f;
        }
        self.tail[lvl] = f;
    }

    #[inline(always)]
    fn unlink(&mut self, lvl: usize, f: u32) {
        let Slot {
            prev: p, next: n, ..
        } = self.slots[f as usize];
        if p == NIL {
            self.head[lvl] = n;
        } else {
            self.slots[p as usize].next = n;
        }
        if n == NIL {
            self.tail[lvl] = p;
        } else {
            self.slots[n as usize].prev = p;
        }
        if self.head[lvl] == NIL {
            self.mask &= !(1 << lvl);
        }
    }
}

/// The controller's per-flow state: its backlog list links, the packets it
/// holds and its packet length.
#[derive(Clone, Copy)]
struct Slot {
    next: u32,
    prev: u32,
    backlog: u32,
    len: u32,
}

#[inline]
fn level(backlog: u32) -> usize {
    (backlog as usize).min(LEVELS - 1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use pspat_sched::{AlgKind, SchedulerConfig};

    fn harness(spec: &str, qmin: u64, qmax: u64) -> Harness<pspat_sched::AnyScheduler> {
        let fs = Flowsets::parse(spec).unwrap();
        let mut cfg = SchedulerConfig::new(AlgKind::Fifo);
        cfg.capacity = qmax as usize;
        Harness::new(
            cfg.build(fs.flow_table().unwrap()).unwrap(),
            &fs,
            qmin,
            qmax,
        )
        .unwrap()
    }

    #[test]
    fn fill_spreads_evenly_over_flows() {
        // 4 flows, fill to 40 without draining: each gets exactly 10.
        let mut h = harness("1::4", 0, 41);
        h.run(40);
        assert!(h.slots.iter().all(|s| s.backlog == 10));
        assert_eq!(h.pending(), 40);
    }

    #[test]
    fn hysteresis_alternates_between_qmin_and_qmax() {
        let mut h = harness("1::3", 2, 9);
        let mut max_seen = 0;
        let mut min_after_drain = u64::MAX;
        for _ in 0..1000 {
            h.run(1);
            max_seen = max_seen.max(h.pending());
            if h.draining {
                min_after_drain = min_after_drain.min(h.pending());
            }
        }
        assert_eq!(max_seen, 9);
        assert_eq!(min_after_drain, 2);
        let s = h.stats();
        assert_eq!(s.enqueues + s.dequeues, 1000);
        assert_eq!((s.drops, s.empty_dequeues), (0, 0));
        assert_eq!(h.scheduler().queued() as u64, h.pending());
    }

    #[test]
    fn batched_runs_match_single_steps() {
        // run(n) makes the hysteresis test once per batch; the sequence of
        // operations must be exactly that of testing before every step.
        for (spec, qmin, qmax) in [("1::5", 3, 40), ("1::3,2::40", 0, 500), ("1::1", 0, 1)] {
            let mut a = harness(spec, qmin, qmax);
            let mut b = harness(spec, qmin, qmax);
            let mut sizes = fastrand::Rng::with_seed(qmax);
            let mut done = 0;
            while done < 5_000 {
                let n = sizes.u64(1..300);
                a.run(n);
                for _ in 0..n {
                    b.run(1);
                    assert!(b.pending() <= qmax);
                }
                done += n;
                assert_eq!(a.stats(), b.stats());
                assert_eq!((a.pending(), a.draining), (b.pending(), b.draining));
                assert!(a
                    .slots
                    .iter()
                    .zip(b.slots.iter())
                    .all(|(x, y)| x.backlog == y.backlog && x.next == y.next && x.prev == y.prev));
                assert_eq!((a.head, a.tail, a.mask), (b.head, b.tail, b.mask));
            }
        }
    }

    #[test]
    fn backlogs_beyond_the_last_level_are_tracked() {
        let mut h = harness("1::2", 0, 200);
        h.run(199);
        let total: u32 = h.slots.iter().map(|s| s.backlog).sum();
        assert_eq!(total, 199);
        assert!(h.slots.iter().all(|s| (99..=100).contains(&s.backlog)));
    }

    #[test]
    fn flowset_ranges_and_defaults() {
        let fs = Flowsets::parse("::,1-3-3:60-120-2:2").unwrap();
        assert_eq!(
            fs.sets()[0],
            Flowset {
                weight: 1,
                len: 1000,
                flows: 1
            }
        );
        assert_eq!(fs.sets().len(), 1 + 3 * 2);
        assert_eq!(fs.flows(), 1 + 6 * 2);
        assert_eq!(
            fs.sets()[6],
            Flowset {
                weight: 3,
                len: 120,
                flows: 2
            }
        );
        let mix = Flowsets::parse("1::32k,2::4k,4::2k,8::1k,128::16,1k::1").unwrap();
        assert_eq!(mix.flows(), 32768 + 4096 + 2048 + 1024 + 16 + 1);
        assert_eq!(mix.sets()[5].weight, 1024);
    }
}
