//! The delay line: packets that left the link wait here until their exit
//! time; plus the two random delays, dummynet's empirical profile and
//! pspat's jitter.
//!
//! # Guarantees
//! * **Never early.** The line hands out an entry only when
//!   its exit time is at or before `now`, and an exit time is never before
//!   the packet's departure from the link.
//! * **Order.** In order-keeping mode (the default) exit times are made
//!   non-decreasing (`exit = max(departure + delay + jitter, previous exit)`),
//!   so packets leave in the order they left the link. tc-netem instead
//!   reorders whenever the jitter exceeds the spacing of packets, which
//!   users of it often do not expect; here that takes `reorder`. The price
//!   of order: a packet drawn a short delay waits behind one drawn a long
//!   one, so closely spaced packets see the running maximum of the samples,
//!   not the samples. With `reorder` a packet may overtake others; equal
//!   exit times keep link order.
//! * **Bounded memory.** The capacity is fixed at construction; a full line
//!   refuses (the pipe then holds the packet in its scheduler: nothing is
//!   dropped for lack of room).
//!
//! # Profiles (dummynet's `profile FILE`, `dn_heap.c`'s `extra_bits`)
//! A profile is a table of `samples` delays (the inverse cumulative
//! distribution, built by `pspat_config`); each packet draws an index
//! uniformly. dummynet converts the sample into extra bits on the link, so
//! it *occupies the link* (it models MAC overhead such as 802.11 backoff);
//! the pipe does the same in time units. An index at or above
//! `⌊loss_level · samples⌋` loses the packet after it has occupied the link.
//! Deviation: dummynet's extra bits are `sample × bw`, hence zero on an
//! unlimited link; pspat adds the sample's time whatever the rate.
//!
//! # Jitter (tc-netem(8) `delay TIME JITTER distribution D`)
//! `uniform`: uniform in `[−j, +j]`; `normal`: mean 0, standard deviation
//! `j`; `pareto`: shape 3, mean 0, minimum `−j`, a heavy right tail
//! ([`super::random::centered_pareto`]); `paretonormal`: tc-netem's mix of
//! the two at one quantile ([`super::random::pareto_normal`]). A sample that would put the exit
//! before the departure is cut at the departure.
//!
//! # Correlated jitter (tc-netem(8) `delay TIME JITTER CORRELATION`)
//! With [`crate::pipe::PipeConfig::jitter_correlation`] ρ > 0, the samples
//! come from an AR(1) standard normal sequence `z' = ρ·z + √(1−ρ²)·ε`
//! mapped through the distribution's quantile function at `Φ(z')`
//! ([`Jitter::at_normal`]): successive samples are correlated (ρ itself
//! for `normal`) and each keeps the distribution. tc-netem mixes each
//! uniform draw with the last one instead, which narrows the distribution
//! as the correlation grows.
//!
//! # Complexity
//! Order-keeping: O(1) per insert and per exit: a ring of (exit time,
//! packet, fate), 32 bytes an entry, whose exit times are non-decreasing,
//! so finding what is due is one comparison with the front. The ring has
//! a power of two of entries (the capacity rounded up, so at most twice
//! the memory asked for) so that an index wraps with a mask; it admits
//! no more than the capacity. Reordering:
//! O(log n) (a binary heap, entries tagged with their link order). Never
//! allocates after construction (growing the line on a live change does).

use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;

use fastrand::Rng;

use super::random::{
    centered_pareto, centered_pareto_at, normal_cdf, pareto_normal, pareto_normal_at,
    standard_normal,
};
use super::Fate;
use crate::{ConfigError, Instant, Packet};

/// The distribution of the jitter.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum JitterDistribution {
    /// Uniform in `[−jitter, +jitter]`.
    #[default]
    Uniform,
    /// Normal with standard deviation `jitter`.
    Normal,
    /// Pareto (shape 3) with mean 0 and minimum `−jitter`.
    Pareto,
    /// tc-netem's `paretonormal`: a quarter normal, three quarters Pareto
    /// at one quantile, mean 0 ([`super::random::pareto_normal`]), times
    /// `jitter`.
    ParetoNormal,
}

/// Delay variation added to each packet's delay.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Jitter {
    /// Scale in ns (see [`JitterDistribution`]).
    pub ns: u64,
    /// Its distribution.
    pub distribution: JitterDistribution,
}

impl Jitter {
    /// The sample at the quantile `Φ(z)` of a standard normal `z`, in ns:
    /// `z` itself scaled for `normal`, the distribution's quantile
    /// function at `Φ(z)` for the others (a Gaussian copula: correlated
    /// normals give correlated samples with this distribution's
    /// marginal, [`Pipe`](super::Pipe)'s jitter correlation). The tails use
    /// `Φ(−z)` rather than `1 − Φ(z)`, so they keep their precision.
    ///
    /// # Examples
    /// ```
    /// use pspat_sched::pipe::{Jitter, JitterDistribution};
    /// let j = |distribution| Jitter { ns: 1_000, distribution };
    /// assert_eq!(j(JitterDistribution::Normal).at_normal(1.5), 1_500);
    /// assert_eq!(j(JitterDistribution::Uniform).at_normal(0.0), 0);
    /// // Pareto's minimum, −jitter, at the far left.
    /// assert_eq!(j(JitterDistribution::Pareto).at_normal(-9.0), -1_000);
    /// ```
    pub fn at_normal(&self, z: f64) -> i64 {
        let j = self.ns as f64;
        // 1 − Φ(z), precise in the right tail.
        let upper = normal_cdf(-z);
        let x = match self.distribution {
            JitterDistribution::Uniform => (1.0 - 2.0 * upper) * j,
            JitterDistribution::Normal => z * j,
            JitterDistribution::Pareto => centered_pareto_at(upper) * j,
            JitterDistribution::ParetoNormal => pareto_normal_at(z, upper) * j,
        };
        x.round() as i64
    }

    /// One sample in ns (may be negative).
    ///
    /// # Examples
    /// ```
    /// use pspat_sched::pipe::{Jitter, JitterDistribution};
    /// let j = Jitter { ns: 1_000, distribution: JitterDistribution::Uniform };
    /// let mut rng = fastrand::Rng::with_seed(2);
    /// assert!((0..1000).all(|_| j.sample(&mut rng).abs() <= 1_000));
    /// ```
    pub fn sample(&self, rng: &mut Rng) -> i64 {
        let j = self.ns as f64;
        let x = match self.distribution {
            JitterDistribution::Uniform => (2.0 * rng.f64() - 1.0) * j,
            JitterDistribution::Normal => standard_normal(rng) * j,
            JitterDistribution::Pareto => centered_pareto(rng) * j,
            JitterDistribution::ParetoNormal => pareto_normal(rng) * j,
        };
        // `as` saturates at the i64 range (and maps NaN to 0).
        x.round() as i64
    }
}

/// dummynet's empirical delay profile, as a table of extra delays.
///
/// # Examples
/// ```
/// use pspat_sched::pipe::DelayProfile;
/// let p = DelayProfile::new(vec![0, 10, 20, 30], 0.5).unwrap();
/// let mut rng = fastrand::Rng::with_seed(1);
/// for _ in 0..100 {
///     let (extra, lost) = p.sample(&mut rng);
///     assert_eq!(lost, extra >= 20); // indices 2 and 3 are at or above 0.5 × 4
/// }
/// assert!(DelayProfile::new(vec![], 1.0).is_err());
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DelayProfile {
    table_ns: Vec<u64>,
    /// Indices at or above this lose the packet.
    loss_index: usize,
}

impl DelayProfile {
    /// A profile of `table_ns` equally likely extra delays (ns), losing the
    /// packet when the drawn index is at or above `⌊loss_level · len⌋`.
    ///
    /// # Errors
    /// An empty table or a `loss_level` outside 0..=1.
    pub fn new(table_ns: Vec<u64>, loss_level: f64) -> Result<Self, ConfigError> {
        if table_ns.is_empty() {
            return Err(ConfigError::invalid(
                "delay profile",
                "the sample table is empty",
            ));
        }
        super::filter::check_probability("profile loss-level", loss_level)?;
        let loss_index = (loss_level * table_ns.len() as f64).floor() as usize;
        Ok(DelayProfile {
            table_ns,
            loss_index,
        })
    }

    /// The table, ns.
    pub fn table_ns(&self) -> &[u64] {
        &self.table_ns
    }

    /// The first index that loses the packet.
    pub fn loss_index(&self) -> usize {
        self.loss_index
    }

    /// The largest extra delay, ns.
    pub fn max_ns(&self) -> u64 {
        self.table_ns.iter().copied().max().unwrap_or(0)
    }

    /// Draws one entry: (extra delay in ns, whether the packet is lost).
    pub fn sample(&self, rng: &mut Rng) -> (u64, bool) {
        let i = rng.usize(..self.table_ns.len());
        (self.table_ns[i], i >= self.loss_index)
    }
}

/// A packet leaving the delay line.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Due {
    pub exit: Instant,
    pub packet: Packet,
    pub fate: Fate,
}

/// A packet waiting in the reordering line (a heap), with its link order.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Entry {
    due: Due,
    /// Link order, to break ties in the heap.
    seq: u64,
}

impl PartialEq for Entry {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Entry {}
impl PartialOrd for Entry {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Entry {
    fn cmp(&self, other: &Self) -> Ordering {
        (self.due.exit, self.seq).cmp(&(other.due.exit, other.seq))
    }
}

/// The order-keeping line: a ring of fixed capacity whose exit times are
/// non-decreasing from `head` on, so the earliest exit is always at `head`.
#[derive(Clone, Debug)]
pub(crate) struct Ring {
    /// A power of two of them (the capacity asked for, rounded up), so
    /// that an index wraps with a mask ([`Ring::wrap`]); the line admits
    /// only its own capacity ([`DelayLine::free`]).
    slots: Box<[Due]>,
    /// Index of the oldest entry (meaningless when `len == 0`).
    head: usize,
    len: usize,
}

/// What an unused ring slot holds.
const VACANT: Due = Due {
    exit: Instant::ZERO,
    packet: Packet::new(crate::FlowId(0), 0, 0),
    fate: Fate::Transmit,
};

impl Ring {
    fn new(capacity: usize) -> Self {
        Ring {
            slots: vec![VACANT; Self::slots_for(capacity)].into_boxed_slice(),
            head: 0,
            len: 0,
        }
    }

    /// The ring with room for `capacity` entries, the same entries in the same order.
    fn grown(&self, capacity: usize) -> Self {
        let mut slots = vec![VACANT; Self::slots_for(capacity)].into_boxed_slice();
        for (k, s) in slots.iter_mut().take(self.len).enumerate() {
            *s = self.slots[self.wrap(self.head + k)];
        }
        Ring {
            slots,
            head: 0,
            len: self.len,
        }
    }

    /// Slots for a line of `capacity` entries: the next power of two (the
    /// capacity is at most [`crate::pipe::MAX_DELAY_LINE`], so it exists).
    fn slots_for(capacity: usize) -> usize {
        capacity.max(1).next_power_of_two()
    }

    /// `i` as a slot index: `i` modulo the slot count, a power of two.
    #[inline(always)]
    fn wrap(&self, i: usize) -> usize {
        i & (self.slots.len() - 1)
    }

    #[inline(always)]
    fn front(&self) -> Option<&Due> {
        if self.len == 0 {
            None
        } else {
            self.slots.get(self.head)
        }
    }

    /// Appends `d`; the caller checked that there is room.
    #[inline(always)]
    fn push(&mut self, d: Due) {
        let at = self.wrap(self.head + self.len);
        self.slots[at] = d;
        self.len += 1;
    }

    /// Removes the front entry when it is the only one due at `now` and a
    /// plain transmission ([`DelayLine::pop_sole_due`]).
    #[inline(always)]
    fn pop_sole_due(&mut self, now: Instant) -> SoleDue {
        if self.len == 0 {
            return SoleDue::Nothing;
        }
        let Some(d) = self.slots.get(self.head) else {
            return SoleDue::Several;
        };
        if d.exit > now {
            return SoleDue::Nothing;
        }
        if !matches!(d.fate, Fate::Transmit) {
            return SoleDue::Several;
        }
        let packet = d.packet;
        let next = self.wrap(self.head + 1);
        if self.len > 1 && self.slots.get(next).is_none_or(|e| e.exit <= now) {
            return SoleDue::Several;
        }
        self.head = next;
        self.len -= 1;
        SoleDue::Packet(packet)
    }

    /// Removes and returns the front entry if there is one and its exit
    /// time is at or before `now`: one read of the front, bounds-checked
    /// once.
    #[inline(always)]
    fn pop_due(&mut self, now: Instant) -> Option<Due> {
        if self.len == 0 {
            return None;
        }
        let d = self.slots.get(self.head)?;
        if d.exit > now {
            return None;
        }
        let d = *d;
        self.head = self.wrap(self.head + 1);
        self.len -= 1;
        Some(d)
    }
}

/// What [`DelayLine::pop_sole_due`] found at the front of the line.
#[derive(Clone, Copy, Debug)]
pub(crate) enum SoleDue {
    /// Nothing is due.
    Nothing,
    /// The one due entry, a transmission, now removed.
    Packet(Packet),
    /// More than one entry is due, or the due one is not a plain
    /// transmission, or the line reorders: nothing was removed.
    Several,
}

/// The line itself: a ring when order is kept, a heap when reordering.
#[derive(Clone, Debug)]
pub(crate) enum Line {
    Fifo(Ring),
    Heap(BinaryHeap<Reverse<Entry>>),
}

/// A fixed-capacity delay line.
#[derive(Clone, Debug)]
pub(crate) struct DelayLine {
    line: Line,
    capacity: usize,
    /// Exit time of the last insert (order-keeping floor).
    last_exit: Instant,
    seq: u64,
    /// Entries that are duplicates (rare), so that the originals, the
    /// pipe's held packets, are `len - duplicates` and an ordinary packet
    /// touches no count of its own.
    duplicates: usize,
}

impl DelayLine {
    pub fn new(capacity: usize, reorder: bool) -> Self {
        let line = if reorder {
            Line::Heap(BinaryHeap::with_capacity(capacity))
        } else {
            Line::Fifo(Ring::new(capacity))
        };
        DelayLine {
            line,
            capacity,
            last_exit: Instant::ZERO,
            seq: 0,
            duplicates: 0,
        }
    }

    /// Room for at least `capacity` entries (never shrinks); allocates, so
    /// it is for reconfiguration, not the packet path.
    pub fn grow(&mut self, capacity: usize) {
        if capacity > self.capacity {
            let more = capacity - self.len();
            match &mut self.line {
                Line::Fifo(r) => *r = r.grown(capacity),
                Line::Heap(h) => h.reserve(more),
            }
            self.capacity = capacity;
        }
    }

    /// Whether jitter may reorder (a heap) or order is kept (a FIFO).
    pub fn reorders(&self) -> bool {
        matches!(self.line, Line::Heap(_))
    }

    #[inline(always)]
    pub fn len(&self) -> usize {
        match &self.line {
            Line::Fifo(r) => r.len,
            Line::Heap(h) => h.len(),
        }
    }

    #[inline(always)]
    pub fn free(&self) -> usize {
        self.capacity - self.len()
    }

    /// Entries that are not duplicates (the pipe's held packets).
    pub fn originals(&self) -> usize {
        self.len() - self.duplicates
    }

    /// The earliest exit time held.
    #[inline(always)]
    pub fn next_exit(&self) -> Option<Instant> {
        match &self.line {
            Line::Fifo(r) => r.front().map(|e| e.exit),
            Line::Heap(h) => h.peek().map(|e| e.0.due.exit),
        }
    }

    /// The exit [`DelayLine::insert`] would give an entry wished to leave
    /// at `wish` (later only to keep order).
    #[inline(always)]
    pub fn floor(&self, wish: Instant) -> Instant {
        match &self.line {
            Line::Fifo(_) => wish.max(self.last_exit),
            Line::Heap(_) => wish,
        }
    }

    /// `wish`, or the latest exit time given so far when that is later:
    /// the exit of an entry that must not overtake any entry before it,
    /// whether the line reorders or not.
    #[inline]
    pub fn after_all(&self, wish: Instant) -> Instant {
        wish.max(self.last_exit)
    }

    /// Inserts a packet with a wished exit time `wish` (at or after its
    /// departure from the link); returns the exit time given (later than
    /// `wish` only to keep order). The caller checked [`DelayLine::free`].
    #[inline(always)]
    pub fn insert(&mut self, wish: Instant, packet: Packet, fate: Fate) -> Instant {
        debug_assert!(self.free() > 0);
        if matches!(fate, Fate::Duplicate) {
            self.duplicates += 1;
        }
        match &mut self.line {
            Line::Fifo(r) => {
                // Exit times stay non-decreasing along the ring.
                let exit = wish.max(self.last_exit);
                self.last_exit = exit;
                r.push(Due { exit, packet, fate });
                exit
            }
            Line::Heap(h) => {
                self.last_exit = self.last_exit.max(wish);
                h.push(Reverse(Entry {
                    due: Due {
                        exit: wish,
                        packet,
                        fate,
                    },
                    seq: self.seq,
                }));
                self.seq += 1;
                wish
            }
        }
    }

    /// Removes the earliest entry when it is due at `now`, a
    /// [`Fate::Transmit`], and the only entry due: what [`Pipe::release`]
    /// would hand out, for a caller that takes one packet at a time. Three
    /// reads of the ring and no change when it reports
    /// [`SoleDue::Several`] (or always, when the line reorders).
    ///
    /// [`Pipe::release`]: crate::Pipe::release
    #[inline(always)]
    pub fn pop_sole_due(&mut self, now: Instant) -> SoleDue {
        // A transmission is an original: no count changes.
        match &mut self.line {
            Line::Fifo(r) => r.pop_sole_due(now),
            Line::Heap(_) => SoleDue::Several,
        }
    }

    /// Removes and returns the earliest entry if its exit time is ≤ `now`:
    /// in order-keeping mode one comparison with the ring's front.
    #[inline(always)]
    pub fn pop_due(&mut self, now: Instant) -> Option<Due> {
        let d = match &mut self.line {
            Line::Fifo(r) => r.pop_due(now)?,
            Line::Heap(h) => {
                if h.peek()?.0.due.exit > now {
                    return None;
                }
                h.pop()?.0.due
            }
        };
        if matches!(d.fate, Fate::Duplicate) {
            self.duplicates -= 1;
        }
        Some(d)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::FlowId;

    #[test]
    fn entries_are_as_small_as_the_docs_say() {
        assert_eq!(std::mem::size_of::<Due>(), 32);
        assert_eq!(std::mem::size_of::<Reverse<Entry>>(), 40);
    }

    #[test]
    fn a_grown_ring_keeps_its_entries_in_order_across_the_wrap() {
        let mut line = DelayLine::new(3, false);
        let pkt = |t| Packet::new(FlowId(0), 100, t);
        // Fill, pop two, append two: the ring has wrapped.
        for t in 0..3 {
            line.insert(Instant::from_nanos(10 * t), pkt(t), Fate::Transmit);
        }
        for _ in 0..2 {
            line.pop_due(Instant::MAX).unwrap();
        }
        line.insert(Instant::from_nanos(5), pkt(3), Fate::Transmit); // kept behind 20
        line.insert(Instant::from_nanos(30), pkt(4), Fate::Duplicate);
        assert_eq!((line.len(), line.free(), line.originals()), (3, 0, 2));
        line.grow(8);
        assert_eq!(line.free(), 5);
        line.insert(Instant::from_nanos(40), pkt(5), Fate::Transmit);
        let mut out = Vec::new();
        while let Some(d) = line.pop_due(Instant::from_nanos(35)) {
            out.push((d.packet.token, d.exit.as_nanos()));
        }
        assert_eq!(out, [(2, 20), (3, 20), (4, 30)]);
        assert_eq!(line.next_exit(), Some(Instant::from_nanos(40)));
        assert_eq!(line.originals(), 1);
    }

    proptest::proptest! {
        /// A ring whose capacity is not a power of two (its slots are
        /// rounded up) admits exactly its capacity and hands entries out
        /// in order across many wraps, as a plain queue would.
        #[test]
        fn a_ring_admits_its_capacity_and_keeps_order_across_wraps(
            capacity in 2usize..12,
            ops in proptest::collection::vec((0u8..3, 0u64..30), 1..400),
        ) {
            let mut line = DelayLine::new(capacity, false);
            let mut model: std::collections::VecDeque<(u64, u64)> = Default::default();
            let (mut now, mut token, mut last) = (0u64, 0u64, 0u64);
            for (op, dt) in ops {
                now += dt;
                let t = Instant::from_nanos(now);
                match op {
                    0 if line.free() > 0 => {
                        let exit = line.insert(t.saturating_add_nanos(dt), Packet::new(FlowId(0), 1, token), Fate::Transmit);
                        last = last.max(now + dt);
                        proptest::prop_assert_eq!(exit.as_nanos(), last);
                        model.push_back((token, last));
                        token += 1;
                    }
                    0 => proptest::prop_assert_eq!(model.len(), capacity),
                    1 => {
                        let got = line.pop_due(t).map(|d| (d.packet.token, d.exit.as_nanos()));
                        let want = match model.front() {
                            Some(&(_, e)) if e <= now => model.pop_front(),
                            _ => None,
                        };
                        proptest::prop_assert_eq!(got, want);
                    }
                    _ => {
                        let due = model.iter().take_while(|e| e.1 <= now).count();
                        match line.pop_sole_due(t) {
                            SoleDue::Nothing => proptest::prop_assert_eq!(due, 0),
                            SoleDue::Packet(p) => {
                                proptest::prop_assert_eq!(due, 1);
                                proptest::prop_assert_eq!(Some(p.token), model.pop_front().map(|e| e.0));
                            }
                            SoleDue::Several => proptest::prop_assert!(due > 1),
                        }
                    }
                }
                proptest::prop_assert_eq!((line.len(), line.free()), (model.len(), capacity - model.len()));
            }
        }
    }
}
