//! Per-flow parameters shared by every algorithm: weight, maximum packet
//! length and priority, validated into a [`FlowTable`] of flow slots.
//!
//! # Lifecycle
//! A table has `capacity` slots, flow ids `0..capacity`, each present or
//! absent. Schedulers size their per-flow state by the capacity when they
//! are built, so adding a flow later allocates nothing; a flow is added,
//! changed and removed through [`crate::Scheduler::add_flow`],
//! [`crate::Scheduler::change_flow`] and [`crate::Scheduler::remove_flow`],
//! which keep the scheduler's own table in step.
//!
//! # Memory
//! A slot takes 8 bytes: the weight (`u32`), the lmax (`u16`: validation
//! keeps it in 1..=[`MAX_PACKET_LEN`], 65 535) and the priority (`u8`),
//! packed from and unpacked to the public [`FlowParams`]; the accessors
//! return [`FlowParams`] by value.
//!
//! # Complexity
//! `insert` O(1); `update` and `remove` O(1), or O(capacity) when they take
//! away the largest lmax or the smallest weight (both are kept for the
//! present flows, and are then found again by a scan).

use serde::{Deserialize, Serialize};

use crate::{ConfigError, FlowError, FlowId, MAX_PACKET_LEN};

/// Smallest accepted weight.
pub const MIN_WEIGHT: u32 = 1;
/// Largest accepted weight (dummynet's RR and QFQ range).
pub const MAX_WEIGHT: u32 = 65_536;
/// Number of strict priorities (0 is the highest).
pub const PRIORITIES: u8 = 64;
/// Default maximum packet length of a flow, in bytes.
pub const DEFAULT_LMAX: u32 = 1_500;

/// The configuration of one flow.
///
/// # Examples
/// ```
/// use pspat_sched::FlowParams;
/// let f = FlowParams::weighted(10);
/// assert_eq!((f.weight, f.lmax, f.priority), (10, 1500, 0));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct FlowParams {
    /// Share of the link relative to the other flows, [`MIN_WEIGHT`]..=[`MAX_WEIGHT`].
    pub weight: u32,
    /// Largest packet the flow sends, 1..=65535 bytes (QFQ groups by it).
    pub lmax: u32,
    /// Strict priority for PRIO, 0 (highest) ..= 63.
    pub priority: u8,
}

impl Default for FlowParams {
    fn default() -> Self {
        FlowParams {
            weight: 1,
            lmax: DEFAULT_LMAX,
            priority: 0,
        }
    }
}

impl FlowParams {
    /// A flow with `weight` and the default lmax and priority.
    pub const fn weighted(weight: u32) -> Self {
        FlowParams {
            weight,
            lmax: DEFAULT_LMAX,
            priority: 0,
        }
    }

    /// The first field out of its range, as (field, value, allowed range).
    fn invalid_field(&self) -> Option<InvalidField> {
        if !(MIN_WEIGHT..=MAX_WEIGHT).contains(&self.weight) {
            return Some((
                "weight",
                self.weight.to_string(),
                format!("{MIN_WEIGHT}..={MAX_WEIGHT}"),
            ));
        }
        if !(1..=MAX_PACKET_LEN).contains(&self.lmax) {
            return Some((
                "lmax",
                self.lmax.to_string(),
                format!("1..={MAX_PACKET_LEN}"),
            ));
        }
        if self.priority >= PRIORITIES {
            return Some((
                "priority",
                self.priority.to_string(),
                format!("0..={}", PRIORITIES - 1),
            ));
        }
        None
    }

    /// Checks every field for flow `flow`.
    ///
    /// # Errors
    /// [`FlowError::InvalidParams`] naming the first field out of range.
    ///
    /// # Examples
    /// ```
    /// use pspat_sched::{FlowId, FlowParams};
    /// assert!(FlowParams::weighted(3).validate(FlowId(0)).is_ok());
    /// let bad = FlowParams { lmax: 0, ..FlowParams::default() };
    /// assert!(bad.validate(FlowId(0)).unwrap_err().to_string().contains("lmax"));
    /// ```
    pub fn validate(&self, flow: FlowId) -> Result<(), FlowError> {
        match self.invalid_field() {
            None => Ok(()),
            Some(bad) => Err(invalid_params(flow, bad)),
        }
    }
}

/// A field out of its range: (field, value, allowed range).
type InvalidField = (&'static str, String, String);

fn invalid_params(flow: FlowId, (field, value, allowed): InvalidField) -> FlowError {
    FlowError::InvalidParams {
        flow: flow.0,
        field,
        value,
        allowed,
    }
}

/// One packed slot of a [`FlowTable`] (8 bytes): the fields of a validated
/// [`FlowParams`], lmax narrowed to 16 bits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Slot {
    weight: u32,
    lmax: u16,
    priority: u8,
}

// An lmax of at most `MAX_PACKET_LEN` fits the slot's 16 bits, and a slot
// stays at 8 bytes (the memory of every dynamic queue counts it).
const _: () = assert!(MAX_PACKET_LEN <= u16::MAX as u32);
const _: () = assert!(DEFAULT_LMAX <= MAX_PACKET_LEN);
const _: () = assert!(std::mem::size_of::<Slot>() == 8);

impl Slot {
    /// The slot of an absent flow: the default parameters.
    const ABSENT: Slot = Slot {
        weight: 1,
        lmax: DEFAULT_LMAX as u16,
        priority: 0,
    };

    /// Validates `params` and packs them.
    ///
    /// # Errors
    /// The first field out of range, as (field, value, allowed range); an
    /// lmax beyond 16 bits is one (it is never truncated).
    fn pack(params: &FlowParams) -> Result<Slot, InvalidField> {
        if let Some(bad) = params.invalid_field() {
            return Err(bad);
        }
        let lmax = u16::try_from(params.lmax).map_err(|_| {
            (
                "lmax",
                params.lmax.to_string(),
                format!("1..={MAX_PACKET_LEN}"),
            )
        })?;
        Ok(Slot {
            weight: params.weight,
            lmax,
            priority: params.priority,
        })
    }

    /// [`Slot::pack`] for `flow`, its error as a [`FlowError`].
    fn pack_flow(flow: FlowId, params: &FlowParams) -> Result<Slot, FlowError> {
        Slot::pack(params).map_err(|bad| invalid_params(flow, bad))
    }

    #[inline]
    fn unpack(self) -> FlowParams {
        FlowParams {
            weight: self.weight,
            lmax: u32::from(self.lmax),
            priority: self.priority,
        }
    }
}

/// A validated table of flow slots; `FlowId(i)` is slot `i`, present or
/// absent. Schedulers size their per-flow state by the capacity when they
/// are built and follow the table through
/// [`crate::Scheduler::add_flow`], [`crate::Scheduler::change_flow`] and
/// [`crate::Scheduler::remove_flow`], so adding a flow later allocates
/// nothing. `insert` is O(1); `update` and `remove` are O(1), or
/// O(capacity) when they take away the largest lmax or the smallest weight
/// (found again by a scan).
///
/// Each slot is packed in 8 bytes; [`FlowTable::get`], [`FlowTable::slot`],
/// [`FlowTable::slots`] and [`FlowTable::iter`] return [`FlowParams`] by
/// value.
///
/// [`FlowTable::new`] and [`FlowTable::uniform`] make every slot present
/// (capacity = number of flows); [`FlowTable::with_capacity`] leaves room
/// for flows added later.
///
/// # Examples
/// ```
/// use pspat_sched::{FlowId, FlowParams, FlowTable};
/// let t = FlowTable::new(vec![FlowParams::weighted(1), FlowParams::weighted(3)]).unwrap();
/// assert_eq!(t.len(), 2);
/// assert_eq!(t.total_weight(), 4);
/// assert!(FlowTable::new(vec![FlowParams::weighted(0)]).is_err());
///
/// let mut m = FlowTable::with_capacity(4, vec![FlowParams::weighted(2)]).unwrap();
/// assert_eq!((m.len(), m.capacity()), (1, 4));
/// m.insert(FlowId(3), FlowParams::weighted(5)).unwrap();
/// assert_eq!(m.total_weight(), 7);
/// m.remove(FlowId(0)).unwrap();
/// assert!(!m.contains(FlowId(0)) && m.contains(FlowId(3)));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FlowTable {
    /// One packed entry per slot (8 bytes); an absent slot holds the
    /// default parameters.
    flows: Vec<Slot>,
    /// Bit `i` set: slot `i` is present (a bitset, so that the admission
    /// test of every packet reads a few cache-resident words: 4 KiB for
    /// 32 768 slots).
    present: Vec<u64>,
    len: usize,
    total_weight: u64,
    max_lmax: u32,
    min_weight: u32,
}

impl FlowTable {
    /// Largest number of flows a table may hold (flow ids are `u32`, arrays are dense).
    pub const MAX_FLOWS: usize = 1 << 24;

    /// Validates every flow; all are present and the capacity is their number.
    ///
    /// # Errors
    /// [`ConfigError`] naming the first flow whose weight, lmax or priority is
    /// out of range, or an empty or oversized table.
    pub fn new(flows: Vec<FlowParams>) -> Result<Self, ConfigError> {
        if flows.is_empty() {
            return Err(ConfigError::invalid(
                "flow table",
                "no flows: configure at least one",
            ));
        }
        Self::with_capacity(flows.len(), flows)
    }

    /// `capacity` flow slots, the first `initial.len()` present with the
    /// given parameters, the rest absent (to be added later). `initial` may
    /// be empty.
    ///
    /// # Errors
    /// A capacity outside 1..=[`FlowTable::MAX_FLOWS`], more initial flows
    /// than slots, or an initial flow out of range (named).
    pub fn with_capacity(capacity: usize, initial: Vec<FlowParams>) -> Result<Self, ConfigError> {
        ConfigError::check_range("number of flows", capacity, 1..=Self::MAX_FLOWS)?;
        if initial.len() > capacity {
            return Err(ConfigError::out_of_range(
                "number of initial flows",
                initial.len(),
                format!("0..={capacity} (the flow capacity)"),
            ));
        }
        let mut flows = Vec::with_capacity(capacity);
        for (i, f) in initial.iter().enumerate() {
            flows.push(Slot::pack(f).map_err(|(field, value, allowed)| {
                ConfigError::out_of_range(format!("flow {i} {field}"), value, allowed)
            })?);
        }
        let len = initial.len();
        flows.resize(capacity, Slot::ABSENT);
        let mut present = vec![0u64; capacity.div_ceil(64)];
        for i in 0..len {
            present[i / 64] |= 1 << (i % 64);
        }
        let mut t = FlowTable {
            flows,
            present,
            len,
            total_weight: 0,
            max_lmax: DEFAULT_LMAX,
            min_weight: MIN_WEIGHT,
        };
        t.total_weight = t.iter().map(|(_, f)| u64::from(f.weight)).sum();
        t.rescan();
        Ok(t)
    }

    /// `n` flows of weight 1.
    ///
    /// # Errors
    /// As [`FlowTable::new`] (`n == 0` or too many flows).
    pub fn uniform(n: usize) -> Result<Self, ConfigError> {
        Self::new(vec![FlowParams::default(); n])
    }

    /// Finds the largest lmax and the smallest weight again.
    fn rescan(&mut self) {
        let mut max_lmax = 0;
        let mut min_weight = u32::MAX;
        for (_, f) in self.iter() {
            max_lmax = max_lmax.max(f.lmax);
            min_weight = min_weight.min(f.weight);
        }
        self.max_lmax = if self.len == 0 {
            DEFAULT_LMAX
        } else {
            max_lmax
        };
        self.min_weight = if self.len == 0 {
            MIN_WEIGHT
        } else {
            min_weight
        };
    }

    /// Number of **present** flows (equal to [`FlowTable::capacity`] for a
    /// table made by [`FlowTable::new`] or [`FlowTable::uniform`]). Arrays
    /// indexed by flow id are sized by the capacity, not by this.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when no flow is present (only possible for a table made by
    /// [`FlowTable::with_capacity`], or after removals).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Number of flow slots: flow ids are `0..capacity`.
    pub fn capacity(&self) -> usize {
        self.flows.len()
    }

    /// True when `flow` is present.
    #[inline]
    pub fn contains(&self, flow: FlowId) -> bool {
        let i = flow.index();
        i < self.flows.len() && self.present[i / 64] & (1 << (i % 64)) != 0
    }

    /// The parameters of `flow`, if it is present.
    #[inline]
    pub fn get(&self, flow: FlowId) -> Option<FlowParams> {
        if self.contains(flow) {
            self.flows.get(flow.index()).map(|s| s.unpack())
        } else {
            None
        }
    }

    /// The parameters in slot `flow`, present or not: an absent slot, or
    /// one beyond the capacity, gives [`FlowParams::default`], which means
    /// nothing (check [`FlowTable::contains`] first, or use
    /// [`FlowTable::get`]). For the per-packet path, after
    /// [`FlowTable::admit`] has checked the flow.
    #[inline]
    pub fn slot(&self, flow: FlowId) -> FlowParams {
        self.flows
            .get(flow.index())
            .map_or_else(FlowParams::default, |s| s.unpack())
    }

    /// Every slot in id order (`capacity` entries), present or not; an
    /// absent slot gives [`FlowParams::default`], which means nothing: check
    /// [`FlowTable::contains`] or use [`FlowTable::iter`].
    pub fn slots(&self) -> impl ExactSizeIterator<Item = FlowParams> + '_ {
        self.flows.iter().map(|s| s.unpack())
    }

    /// The present flows in id order.
    pub fn iter(&self) -> impl Iterator<Item = (FlowId, FlowParams)> + '_ {
        self.flows
            .iter()
            .enumerate()
            .filter(|&(i, _)| self.present[i / 64] & (1 << (i % 64)) != 0)
            .map(|(i, s)| (FlowId(i as u32), s.unpack()))
    }

    /// Sum of the weights of the present flows.
    pub fn total_weight(&self) -> u64 {
        self.total_weight
    }

    /// The largest lmax of a present flow ([`DEFAULT_LMAX`] when none is).
    pub fn max_lmax(&self) -> u32 {
        self.max_lmax
    }

    /// The smallest weight of a present flow ([`MIN_WEIGHT`] when none is).
    pub fn min_weight(&self) -> u32 {
        self.min_weight
    }

    /// Checks that `flow` is a slot of this table.
    ///
    /// # Errors
    /// [`FlowError::OutOfCapacity`].
    pub fn check_slot(&self, flow: FlowId) -> Result<(), FlowError> {
        if flow.index() < self.capacity() {
            Ok(())
        } else {
            Err(FlowError::OutOfCapacity {
                flow: flow.0,
                capacity: self.capacity(),
            })
        }
    }

    /// Checks that [`FlowTable::insert`] of `flow` would succeed, changing
    /// nothing.
    ///
    /// # Errors
    /// As [`FlowTable::insert`].
    pub fn check_insert(&self, flow: FlowId, params: &FlowParams) -> Result<(), FlowError> {
        self.check_slot(flow)?;
        if self.contains(flow) {
            return Err(FlowError::Present { flow: flow.0 });
        }
        Slot::pack_flow(flow, params).map(|_| ())
    }

    /// Checks that [`FlowTable::update`] of `flow` would succeed, changing
    /// nothing.
    ///
    /// # Errors
    /// As [`FlowTable::update`].
    pub fn check_update(&self, flow: FlowId, params: &FlowParams) -> Result<(), FlowError> {
        self.check_present(flow)?;
        Slot::pack_flow(flow, params).map(|_| ())
    }

    /// Checks that `flow` is present.
    ///
    /// # Errors
    /// [`FlowError::OutOfCapacity`] or [`FlowError::Absent`].
    pub fn check_present(&self, flow: FlowId) -> Result<(), FlowError> {
        self.check_slot(flow)?;
        if self.contains(flow) {
            Ok(())
        } else {
            Err(FlowError::Absent { flow: flow.0 })
        }
    }

    /// Makes the absent slot `flow` present with `params`. O(1).
    ///
    /// # Errors
    /// [`FlowError::OutOfCapacity`], [`FlowError::Present`], or
    /// [`FlowError::InvalidParams`]; the table is then unchanged.
    pub fn insert(&mut self, flow: FlowId, params: FlowParams) -> Result<(), FlowError> {
        self.check_slot(flow)?;
        if self.contains(flow) {
            return Err(FlowError::Present { flow: flow.0 });
        }
        let slot = Slot::pack_flow(flow, &params)?;
        let first = self.len == 0;
        self.flows[flow.index()] = slot;
        self.present[flow.index() / 64] |= 1 << (flow.index() % 64);
        self.len += 1;
        self.total_weight += u64::from(params.weight);
        if first {
            self.max_lmax = params.lmax;
            self.min_weight = params.weight;
        } else {
            self.max_lmax = self.max_lmax.max(params.lmax);
            self.min_weight = self.min_weight.min(params.weight);
        }
        Ok(())
    }

    /// Replaces the parameters of the present flow `flow`; returns the old
    /// ones. O(1), or O(capacity) when the old values were the largest lmax
    /// or the smallest weight.
    ///
    /// # Errors
    /// [`FlowError::OutOfCapacity`], [`FlowError::Absent`] or
    /// [`FlowError::InvalidParams`]; the table is then unchanged.
    pub fn update(&mut self, flow: FlowId, params: FlowParams) -> Result<FlowParams, FlowError> {
        self.check_present(flow)?;
        let slot = Slot::pack_flow(flow, &params)?;
        let old = std::mem::replace(&mut self.flows[flow.index()], slot).unpack();
        self.total_weight = self.total_weight - u64::from(old.weight) + u64::from(params.weight);
        if (old.lmax == self.max_lmax && params.lmax < old.lmax)
            || (old.weight == self.min_weight && params.weight > old.weight)
        {
            self.rescan();
        } else {
            self.max_lmax = self.max_lmax.max(params.lmax);
            self.min_weight = self.min_weight.min(params.weight);
        }
        Ok(old)
    }

    /// Makes the present flow `flow` absent; returns its parameters. O(1),
    /// or O(capacity) when it had the largest lmax or the smallest weight.
    ///
    /// # Errors
    /// [`FlowError::OutOfCapacity`] or [`FlowError::Absent`].
    pub fn remove(&mut self, flow: FlowId) -> Result<FlowParams, FlowError> {
        self.check_present(flow)?;
        let old = std::mem::replace(&mut self.flows[flow.index()], Slot::ABSENT).unpack();
        self.present[flow.index() / 64] &= !(1 << (flow.index() % 64));
        self.len -= 1;
        self.total_weight -= u64::from(old.weight);
        if old.lmax == self.max_lmax || old.weight == self.min_weight {
            self.rescan();
        }
        Ok(old)
    }
}

impl FlowTable {
    /// Checks that `pkt` names a present flow and has a length in
    /// 1..=[`MAX_PACKET_LEN`]; the common admission test of every algorithm.
    ///
    /// # Errors
    /// The packet back in a [`crate::Rejected`] with
    /// [`crate::DropReason::UnknownFlow`] (absent or out of capacity) or
    /// [`crate::DropReason::BadLength`].
    #[inline]
    pub fn admit(&self, pkt: &crate::Packet) -> Result<(), crate::Rejected> {
        let reject = |reason| {
            Err(crate::Rejected {
                packet: *pkt,
                reason,
            })
        };
        if !self.contains(pkt.flow) {
            return reject(crate::DropReason::UnknownFlow);
        }
        if pkt.len == 0 || pkt.len > MAX_PACKET_LEN {
            return reject(crate::DropReason::BadLength);
        }
        Ok(())
    }

    /// True when `pkt` is longer than its flow's lmax, on the per-packet
    /// path once [`FlowTable::admit`] has accepted it (so its flow's slot
    /// exists and its length fits 16 bits: compared in 16 bits, the
    /// comparison reads the packed lmax in the same instruction; a longer
    /// one exceeds every lmax).
    ///
    /// # Panics
    /// When the packet's flow is beyond the capacity, which
    /// [`FlowTable::admit`] refuses first.
    #[inline]
    pub(crate) fn admitted_exceeds_lmax(&self, pkt: &crate::Packet) -> bool {
        let lmax = self.flows[pkt.flow.index()].lmax;
        match u16::try_from(pkt.len) {
            Ok(len) => len > lmax,
            Err(_) => true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_and_extremes_follow_insert_update_remove() {
        let mut t = FlowTable::with_capacity(4, vec![]).unwrap();
        assert!(t.is_empty());
        assert_eq!(
            (t.total_weight(), t.max_lmax(), t.min_weight()),
            (0, DEFAULT_LMAX, 1)
        );
        let p = |weight, lmax| FlowParams {
            weight,
            lmax,
            priority: 0,
        };
        t.insert(FlowId(2), p(5, 100)).unwrap();
        assert_eq!(
            (t.total_weight(), t.max_lmax(), t.min_weight()),
            (5, 100, 5)
        );
        t.insert(FlowId(0), p(3, 900)).unwrap();
        assert_eq!(
            (t.total_weight(), t.max_lmax(), t.min_weight()),
            (8, 900, 3)
        );
        assert_eq!(t.update(FlowId(0), p(7, 50)).unwrap(), p(3, 900));
        assert_eq!(
            (t.total_weight(), t.max_lmax(), t.min_weight()),
            (12, 100, 5)
        );
        t.remove(FlowId(2)).unwrap();
        assert_eq!((t.total_weight(), t.max_lmax(), t.min_weight()), (7, 50, 7));
        assert_eq!(t.iter().map(|(f, _)| f.0).collect::<Vec<_>>(), [0]);
        assert_eq!(t.remove(FlowId(2)), Err(FlowError::Absent { flow: 2 }));
        assert_eq!(
            t.insert(FlowId(4), p(1, 1)),
            Err(FlowError::OutOfCapacity {
                flow: 4,
                capacity: 4
            })
        );
        assert!(FlowTable::with_capacity(0, vec![]).is_err());
        assert!(FlowTable::with_capacity(1, vec![FlowParams::default(); 2]).is_err());
    }

    #[test]
    fn slots_are_8_bytes_and_unpack_to_what_was_stored() {
        assert_eq!(std::mem::size_of::<Slot>(), 8);
        assert_eq!(Slot::ABSENT.unpack(), FlowParams::default());
        let widest = FlowParams {
            weight: MAX_WEIGHT,
            lmax: MAX_PACKET_LEN,
            priority: PRIORITIES - 1,
        };
        let mut t = FlowTable::with_capacity(3, vec![widest]).unwrap();
        assert_eq!(t.get(FlowId(0)), Some(widest));
        assert_eq!(t.max_lmax(), 65_535);
        let one = FlowParams {
            weight: 1,
            lmax: 1,
            priority: 0,
        };
        t.insert(FlowId(2), one).unwrap();
        assert_eq!(t.update(FlowId(0), one).unwrap(), widest);
        assert_eq!(t.insert(FlowId(1), widest), Ok(()));
        assert_eq!(t.remove(FlowId(1)).unwrap(), widest);
        // Absent slots read as the default, present ones as stored.
        assert_eq!(
            t.slots().collect::<Vec<_>>(),
            [one, FlowParams::default(), one]
        );
        assert_eq!(t.slot(FlowId(1)), FlowParams::default());
        assert_eq!(t.slot(FlowId(7)), FlowParams::default());
        let pkt = |len| crate::Packet::new(FlowId(0), len, 0);
        assert!(!t.admitted_exceeds_lmax(&pkt(1)));
        assert!(t.admitted_exceeds_lmax(&pkt(2)));
        assert!(t.admitted_exceeds_lmax(&pkt(65_536)));
        assert_eq!(t.get(FlowId(1)), None);
        assert_eq!(
            t.iter().collect::<Vec<_>>(),
            [(FlowId(0), one), (FlowId(2), one)]
        );
    }

    #[test]
    fn an_lmax_beyond_16_bits_is_refused_on_every_path() {
        let long = FlowParams {
            lmax: 65_536,
            ..FlowParams::default()
        };
        let widest = FlowParams {
            lmax: u32::MAX,
            ..FlowParams::default()
        };
        for bad in [long, widest] {
            let refused = |flow| FlowError::InvalidParams {
                flow,
                field: "lmax",
                value: bad.lmax.to_string(),
                allowed: "1..=65535".into(),
            };
            assert_eq!(bad.validate(FlowId(1)), Err(refused(1)));
            let e = FlowTable::new(vec![FlowParams::default(), bad]).unwrap_err();
            assert!(e.to_string().contains("flow 1 lmax"), "{e}");
            assert!(FlowTable::with_capacity(4, vec![bad]).is_err());

            let mut t = FlowTable::with_capacity(2, vec![FlowParams::weighted(2)]).unwrap();
            let before = t.clone();
            assert_eq!(t.check_insert(FlowId(1), &bad), Err(refused(1)));
            assert_eq!(t.insert(FlowId(1), bad), Err(refused(1)));
            assert_eq!(t.check_update(FlowId(0), &bad), Err(refused(0)));
            assert_eq!(t.update(FlowId(0), bad), Err(refused(0)));
            // Refused whole: nothing stored, nothing truncated.
            assert_eq!(t, before);
            assert_eq!(t.get(FlowId(0)), Some(FlowParams::weighted(2)));
            assert_eq!(t.max_lmax(), DEFAULT_LMAX);
        }
    }
}
