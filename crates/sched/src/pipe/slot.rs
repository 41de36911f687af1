//! Transmission slots (tc-netem(8)'s `slot`): packets leave the delay line
//! only at the instants a slot opens, in bursts, as on a link whose medium
//! is granted in turns (a Wi-Fi station's transmit opportunities, a DOCSIS
//! cable modem's grants).
//!
//! # Model
//! A slot is an instant. A packet whose exit (its finish on the link plus
//! the delay and jitter) is at or before the slot's instant leaves at that
//! instant. Each slot carries at most `packets` packets and `bytes` bytes
//! (the packet that reaches the byte budget still leaves in it); once
//! either is spent, the next slot opens one interval later. A packet whose
//! exit is after the current slot's instant finds that slot gone: the next
//! one opens one interval after the packet's exit (so a packet reaching an
//! idle gate waits one interval). The interval is drawn per slot: uniform
//! between `min` and `max`, or `delay` plus a jitter sample of a
//! distribution ([`SlotInterval`]). This is tc-netem's rule (its dequeue
//! draws the next slot when the budget is spent or when the head's send
//! time is past the slot) with the instants taken from the packets' own
//! times rather than from when the qdisc is polled, so the times depend on
//! the arrivals and the seed only.
//!
//! # Guarantees
//! * Never early: a packet's slotted exit is at or after its exit.
//! * Slot instants never decrease, so a line that keeps order still does,
//!   and a packet's place is decided when it enters the line (the line's
//!   ring, its `poll_at` and its capacity rule are unchanged).
//! * Budgets are counted per entry that leaves (a duplicate is one;
//!   a packet lost to the profile is not), in the order entries enter the
//!   line: with `reorder`, where an entry may leave before one that
//!   entered earlier, that is not always the order they leave in.
//! * A packet tc-netem's `reorder` sends ahead skips the slots as it skips
//!   the delay: it leaves as it leaves the link and spends no budget (netem
//!   serves the packets it sent ahead before its slotted queue). Its
//!   duplicate, if it has one, waits for a slot.
//!
//! # Complexity
//! O(1) per packet and one draw per slot; 40 bytes of state.

use fastrand::Rng;

use super::delay::Jitter;
use crate::{ConfigError, Instant};

/// The time between two slots.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SlotInterval {
    /// Uniform in `[min_ns, max_ns]` (tc-netem's `slot MIN MAX`).
    Uniform {
        /// Shortest interval, ns.
        min_ns: u64,
        /// Longest interval, ns (at least `min_ns`).
        max_ns: u64,
    },
    /// `delay_ns` plus a sample of `jitter`, cut at 0 (tc-netem's `slot
    /// distribution D DELAY JITTER`).
    Drawn {
        /// Mean interval, ns.
        delay_ns: u64,
        /// Its variation and distribution.
        jitter: Jitter,
    },
}

/// A pipe's slots (see the [module docs](self)).
///
/// # Examples
/// ```
/// use pspat_sched::pipe::{SlotInterval, Slots};
/// let s = Slots {
///     interval: SlotInterval::Uniform { min_ns: 800_000, max_ns: 1_200_000 },
///     packets: Some(32),
///     bytes: None,
/// };
/// assert!(s.validate().is_ok());
/// let mut rng = fastrand::Rng::with_seed(1);
/// assert!((0..100).all(|_| (800_000..=1_200_000).contains(&s.draw(&mut rng))));
/// assert!(Slots { packets: Some(0), ..s }.validate().is_err());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Slots {
    /// Time between slots.
    pub interval: SlotInterval,
    /// Packets a slot carries at most (`None`: no limit).
    pub packets: Option<u32>,
    /// Bytes a slot carries at most (`None`: no limit).
    pub bytes: Option<u64>,
}

impl Slots {
    /// Longest interval accepted, ns (one hour).
    pub const MAX_INTERVAL_NS: u64 = 3_600_000_000_000;

    /// Checks the ranges: an interval of at most an hour with `min ≤ max`,
    /// budgets of at least one packet or byte.
    ///
    /// # Errors
    /// [`ConfigError`] naming the bad parameter.
    pub fn validate(&self) -> Result<(), ConfigError> {
        match self.interval {
            SlotInterval::Uniform { min_ns, max_ns } => {
                ConfigError::check_range(
                    "slot max interval (ns)",
                    max_ns,
                    0..=Self::MAX_INTERVAL_NS,
                )?;
                ConfigError::check_range("slot min interval (ns)", min_ns, 0..=max_ns)?;
            }
            SlotInterval::Drawn { delay_ns, jitter } => {
                ConfigError::check_range(
                    "slot interval (ns)",
                    delay_ns,
                    0..=Self::MAX_INTERVAL_NS,
                )?;
                ConfigError::check_range(
                    "slot interval jitter (ns)",
                    jitter.ns,
                    0..=Self::MAX_INTERVAL_NS,
                )?;
            }
        }
        if let Some(p) = self.packets {
            ConfigError::check_range("slot packets", p, 1..=u32::MAX)?;
        }
        if let Some(b) = self.bytes {
            ConfigError::check_range("slot bytes", b, 1..=u64::MAX)?;
        }
        Ok(())
    }

    /// One interval, ns.
    pub fn draw(&self, rng: &mut Rng) -> u64 {
        match self.interval {
            SlotInterval::Uniform { min_ns, max_ns } => rng.u64(min_ns..=max_ns),
            SlotInterval::Drawn { delay_ns, jitter } => {
                let s = jitter.sample(rng);
                if s >= 0 {
                    delay_ns.saturating_add(s.unsigned_abs())
                } else {
                    delay_ns.saturating_sub(s.unsigned_abs())
                }
            }
        }
    }
}

/// The slot state of a running pipe.
#[derive(Clone, Debug)]
pub(crate) struct SlotGate {
    slots: Slots,
    /// The current slot's instant; `None` before the first packet.
    opens: Option<Instant>,
    packets_left: u32,
    bytes_left: u64,
}

impl SlotGate {
    pub fn new(slots: Slots) -> Self {
        SlotGate {
            slots,
            opens: None,
            packets_left: slots.packets.unwrap_or(u32::MAX),
            bytes_left: slots.bytes.unwrap_or(u64::MAX),
        }
    }

    /// The gate with `slots` from now on: the current slot keeps its
    /// instant, its budgets become the new ones.
    pub fn changed(&self, slots: Slots) -> Self {
        SlotGate {
            opens: self.opens,
            ..SlotGate::new(slots)
        }
    }

    /// This gate continuing `old`, the gate of the pipe this one replaces:
    /// `old` itself when the slots are the same, else the current slot's
    /// instant with this gate's budgets ([`SlotGate::changed`]).
    pub fn continuing(&self, old: &SlotGate) -> Self {
        if old.slots == self.slots {
            old.clone()
        } else {
            old.changed(self.slots)
        }
    }

    fn next_slot(&mut self, after: Instant, rng: &mut Rng) -> Instant {
        let at = after.saturating_add_nanos(self.slots.draw(rng));
        self.opens = Some(at);
        self.packets_left = self.slots.packets.unwrap_or(u32::MAX);
        self.bytes_left = self.slots.bytes.unwrap_or(u64::MAX);
        at
    }

    /// The instant at which an entry of `len` bytes that would leave at
    /// `exit` leaves: the current slot's, or a new one's (module docs).
    #[inline]
    pub fn place(&mut self, exit: Instant, len: u32, rng: &mut Rng) -> Instant {
        let at = match self.opens {
            Some(at) if at >= exit => at,
            _ => self.next_slot(exit, rng),
        };
        self.packets_left -= 1;
        self.bytes_left = self.bytes_left.saturating_sub(u64::from(len));
        if self.packets_left == 0 || self.bytes_left == 0 {
            self.next_slot(at, rng);
        }
        at
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pipe::JitterDistribution;

    fn fixed(ns: u64, packets: Option<u32>, bytes: Option<u64>) -> SlotGate {
        SlotGate::new(Slots {
            interval: SlotInterval::Uniform {
                min_ns: ns,
                max_ns: ns,
            },
            packets,
            bytes,
        })
    }

    fn t(ns: u64) -> Instant {
        Instant::from_nanos(ns)
    }

    #[test]
    fn a_packet_at_an_idle_gate_waits_one_interval_and_a_backlog_leaves_together() {
        let mut g = fixed(1_000, None, None);
        let mut rng = Rng::with_seed(1);
        // The first packet opens a slot one interval after its exit; those
        // due by then leave with it.
        assert_eq!(g.place(t(100), 60, &mut rng), t(1_100));
        assert_eq!(g.place(t(500), 60, &mut rng), t(1_100));
        assert_eq!(g.place(t(1_100), 60, &mut rng), t(1_100));
        // Past the slot: the next opens an interval after this exit.
        assert_eq!(g.place(t(1_101), 60, &mut rng), t(2_101));
    }

    #[test]
    fn a_spent_budget_opens_the_next_slot_one_interval_later() {
        let mut g = fixed(1_000, Some(2), Some(1_000));
        let mut rng = Rng::with_seed(1);
        let exits: Vec<u64> = (0..5)
            .map(|_| g.place(t(0), 100, &mut rng).as_nanos())
            .collect();
        assert_eq!(exits, [1_000, 1_000, 2_000, 2_000, 3_000]);
        // Bytes: 600 + 600 reaches 1 000, so the second packet still
        // leaves in the slot and the third waits.
        let mut g = fixed(1_000, None, Some(1_000));
        let exits: Vec<u64> = (0..3)
            .map(|_| g.place(t(0), 600, &mut rng).as_nanos())
            .collect();
        assert_eq!(exits, [1_000, 1_000, 2_000]);
    }

    #[test]
    fn drawn_intervals_stay_in_range_and_are_never_negative() {
        let uniform = Slots {
            interval: SlotInterval::Uniform {
                min_ns: 10,
                max_ns: 20,
            },
            packets: None,
            bytes: None,
        };
        let drawn = Slots {
            interval: SlotInterval::Drawn {
                delay_ns: 100,
                jitter: Jitter {
                    ns: 1_000,
                    distribution: JitterDistribution::Normal,
                },
            },
            ..uniform
        };
        let mut rng = Rng::with_seed(9);
        let u: Vec<u64> = (0..10_000).map(|_| uniform.draw(&mut rng)).collect();
        assert!(u.iter().all(|d| (10..=20).contains(d)));
        assert!(u.contains(&10) && u.contains(&20));
        let d: Vec<u64> = (0..10_000).map(|_| drawn.draw(&mut rng)).collect();
        // About 46% of N(100, 1000) is below 0: cut at 0, not wrapped.
        let zeros = d.iter().filter(|&&x| x == 0).count();
        assert!((4_200..5_000).contains(&zeros), "{zeros}");
        assert!(d.iter().all(|&x| x < 10_000));
    }

    #[test]
    fn bad_ranges_are_refused() {
        let ok = Slots {
            interval: SlotInterval::Uniform {
                min_ns: 5,
                max_ns: 10,
            },
            packets: None,
            bytes: Some(1),
        };
        assert!(ok.validate().is_ok());
        let min_above_max = Slots {
            interval: SlotInterval::Uniform {
                min_ns: 11,
                max_ns: 10,
            },
            ..ok
        };
        assert!(min_above_max.validate().is_err());
        assert!(Slots {
            bytes: Some(0),
            ..ok
        }
        .validate()
        .is_err());
        let too_long = Slots {
            interval: SlotInterval::Uniform {
                min_ns: 0,
                max_ns: Slots::MAX_INTERVAL_NS + 1,
            },
            ..ok
        };
        assert!(too_long.validate().is_err());
    }
}
