//! The exact fluid (GPS) reference: when each packet would finish on an
//! ideal, infinitely divisible link that serves every backlogged flow at once.
//!
//! Parekh and Gallager's Generalized Processor Sharing (IEEE/ACM Trans.
//! Netw. 1(3), 1993), simulated event by event: the system virtual time V
//! advances at B/Σ_{backlogged} φ; a packet of flow k arriving at `a` gets the
//! finish tag F = max(F_prev, V(a)) + len/φ_k; it leaves the fluid system when
//! V reaches F. A flow counts as backlogged from the arrival that finds it
//! empty until its last packet's fluid departure.
//!
//! # Units and precision
//! Time is kept in *ticks* of 1/B ns (B in bit/s), so a packet of `len` bytes
//! needs exactly `len × 8·10⁹` ticks of link time and an arrival at `a` ns is
//! `a × B` ticks: both exact integers. Weights stay integers: V is measured in
//! ticks of service per unit of weight (the paper's V scaled by Σw/B, which
//! changes no comparison), stored in `u128` fixed point with 32 fractional
//! bits. The only roundings are (i) the truncation of each V increment and of
//! each `len/w` term to 2⁻³² tick per unit weight, and (ii) rounding each
//! fluid departure up to a whole tick. A fluid finish time is therefore late
//! by at most one tick plus `(W + 1)·E·2⁻³²` ticks and early by at most
//! `W·E·2⁻³²` ticks, where W is the sum of the weights and E the number of
//! events (arrivals plus departures) since the fluid system was last empty.
//! At 10 Gbit/s (one tick = 0.1 ps) with W = 10⁶ and E = 10⁷ that is below
//! 10⁻⁶ ns. Every product is checked: a run too long for 128 bits is refused
//! with a [`ConfigError`] rather than computed wrongly.
//!
//! # Complexity
//! O(P log P) time and O(P + N) memory for P packets and N flows (one heap
//! entry per pending packet). This is a measurement tool, not a hot path: it
//! allocates freely, but like the rest of the core it reads no clock, spawns
//! no thread and uses no `unsafe`.
//!
//! # Example
//! ```
//! use pspat_eval::fluid::{fluid_finish_times, ticks_to_ns, Arrival};
//! // 8 Gbit/s = 1 byte per ns. Two flows of weights 1 and 3, 1000 bytes each at t = 0:
//! // GPS serves them at 1/4 and 3/4 of the link until flow 1 finishes at 1333.3 ns,
//! // then flow 0 alone; both are done at 2000 ns.
//! let arrivals = [Arrival::new(0, 0, 1000), Arrival::new(0, 1, 1000)];
//! let f = fluid_finish_times(&arrivals, &[1, 3], 8_000_000_000).unwrap();
//! assert!((ticks_to_ns(f[1], 8_000_000_000) - 4000.0 / 3.0).abs() < 1e-6);
//! assert!((ticks_to_ns(f[0], 8_000_000_000) - 2000.0).abs() < 1e-6);
//! ```

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use pspat_sched::rate::{Rate, UNITS_PER_BYTE};
use pspat_sched::{ConfigError, MAX_PACKET_LEN, MAX_WEIGHT, MIN_WEIGHT};

/// Link ticks per byte: a byte takes 8/B s = 8·10⁹ ticks of 1/B ns (the
/// service units of [`pspat_sched::rate`]: a tick of 1/B ns is one unit of
/// `bit/s × ns`).
pub const TICKS_PER_BYTE: u128 = UNITS_PER_BYTE as u128;

/// Fractional bits of the fixed-point virtual time.
const V_FRAC_BITS: u32 = 32;

/// One packet offered to a link: when it arrives, which flow, how long.
///
/// # Examples
/// ```
/// use pspat_eval::fluid::Arrival;
/// let a = Arrival::new(1_000, 2, 1500);
/// assert_eq!((a.time_ns, a.flow, a.len), (1_000, 2, 1500));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Arrival {
    /// Arrival time in ns.
    pub time_ns: u64,
    /// Flow index (into the weight list).
    pub flow: u32,
    /// Length in bytes, 1..=65535.
    pub len: u32,
}

impl Arrival {
    /// An arrival of `len` bytes of `flow` at `time_ns`.
    pub const fn new(time_ns: u64, flow: u32, len: u32) -> Self {
        Arrival { time_ns, flow, len }
    }
}

/// Converts a time in ticks of 1/`rate_bps` ns to ns.
///
/// # Examples
/// ```
/// use pspat_eval::fluid::ticks_to_ns;
/// assert_eq!(ticks_to_ns(25_000_000_000, 10_000_000_000), 2.5);
/// ```
pub fn ticks_to_ns(ticks: u128, rate_bps: u64) -> f64 {
    let b = u128::from(rate_bps.max(1));
    (ticks / b) as f64 + (ticks % b) as f64 / b as f64
}

fn overflow() -> ConfigError {
    ConfigError::invalid(
        "fluid reference",
        "time span too long for exact 128-bit arithmetic; shorten the run or lower the rate",
    )
}

/// Checks the common inputs of the fluid reference and the packet simulation.
fn validate(arrivals: &[Arrival], weights: &[u32], rate_bps: u64) -> Result<(), ConfigError> {
    if weights.is_empty() {
        return Err(ConfigError::invalid(
            "weights",
            "no flows: give at least one weight",
        ));
    }
    for (i, &w) in weights.iter().enumerate() {
        ConfigError::check_range(format!("weight of flow {i}"), w, MIN_WEIGHT..=MAX_WEIGHT)?;
    }
    Rate::checked("link rate (bit/s)", rate_bps)?;
    let mut prev = 0;
    for (i, a) in arrivals.iter().enumerate() {
        if a.flow as usize >= weights.len() {
            return Err(ConfigError::out_of_range(
                format!("flow of packet {i}"),
                a.flow,
                format!("0..={}", weights.len() - 1),
            ));
        }
        ConfigError::check_range(format!("length of packet {i}"), a.len, 1..=MAX_PACKET_LEN)?;
        if a.time_ns < prev {
            return Err(ConfigError::invalid(
                format!("arrival time of packet {i}"),
                "arrivals must be sorted by time",
            ));
        }
        prev = a.time_ns;
    }
    Ok(())
}

/// Computes the fluid (GPS) departure time of every arrival, in ticks of
/// 1/`rate_bps` ns (see [`ticks_to_ns`]); entry `i` belongs to `arrivals[i]`.
///
/// `weights[k]` is flow k's weight; φ_k = w_k/Σw. Arrivals must be sorted by
/// time; simultaneous arrivals are taken in slice order.
///
/// # Errors
/// A weight outside 1..=65536, an empty weight list, a flow without a
/// weight, a length outside 1..=65535, unsorted arrivals, a rate that is
/// not a [`Rate`] (1000..=10¹² bit/s), or a run too long for exact 128-bit
/// arithmetic.
pub fn fluid_finish_times(
    arrivals: &[Arrival],
    weights: &[u32],
    rate_bps: u64,
) -> Result<Vec<u128>, ConfigError> {
    validate(arrivals, weights, rate_bps)?;
    let b = u128::from(rate_bps);
    let mut finish = vec![0u128; arrivals.len()];
    let mut last_f = vec![0u128; weights.len()];
    let mut pending = vec![0u32; weights.len()];
    // Min-heap of (finish tag, packet index): packets leave in tag order.
    let mut heap: BinaryHeap<Reverse<(u128, usize)>> = BinaryHeap::new();
    let mut v: u128 = 0; // virtual time, 2^-32 ticks per unit weight
    let mut t: u128 = 0; // current time in ticks
    let mut wsum: u128 = 0; // weight of fluid-backlogged flows
    let mut i = 0;
    while i < arrivals.len() || !heap.is_empty() {
        let next_arrival = match arrivals.get(i) {
            Some(a) => Some(u128::from(a.time_ns).checked_mul(b).ok_or_else(overflow)?),
            None => None,
        };
        if let Some(&Reverse((f, idx))) = heap.peek() {
            // V reaches f after (f - v)·wsum·2^-32 ticks; round up.
            let scaled = (f - v).checked_mul(wsum).ok_or_else(overflow)?;
            let dt = (scaled >> V_FRAC_BITS) + u128::from(scaled & 0xFFFF_FFFF != 0);
            let t_dep = t.checked_add(dt).ok_or_else(overflow)?;
            if next_arrival.is_none_or(|a| t_dep <= a) {
                heap.pop();
                t = t_dep;
                v = f;
                finish[idx] = t;
                let k = arrivals[idx].flow as usize;
                pending[k] -= 1;
                if pending[k] == 0 {
                    wsum -= u128::from(weights[k]);
                }
                continue;
            }
        }
        let Some(a_ticks) = next_arrival else {
            break; // unreachable: the heap was empty and no arrival is left
        };
        // V advances at 1/wsum per tick while someone is backlogged.
        let elapsed = (a_ticks - t)
            .checked_shl(V_FRAC_BITS)
            .filter(|x| x >> V_FRAC_BITS == a_ticks - t)
            .ok_or_else(overflow)?;
        if let Some(dv) = elapsed.checked_div(wsum) {
            v = v.checked_add(dv).ok_or_else(overflow)?;
        }
        t = a_ticks;
        let a = arrivals[i];
        let k = a.flow as usize;
        let w = u128::from(weights[k]);
        let service = (u128::from(a.len) * TICKS_PER_BYTE) << V_FRAC_BITS;
        let f = last_f[k]
            .max(v)
            .checked_add(service / w)
            .ok_or_else(overflow)?;
        last_f[k] = f;
        if pending[k] == 0 {
            wsum += w;
        }
        pending[k] += 1;
        heap.push(Reverse((f, i)));
        i += 1;
    }
    Ok(finish)
}

#[cfg(test)]
mod tests {
    use super::*;

    const B: u64 = 8_000_000_000; // one byte per ns

    fn ns(f: &[u128]) -> Vec<f64> {
        f.iter().map(|&t| ticks_to_ns(t, B)).collect()
    }

    #[test]
    fn single_flow_is_a_plain_link() {
        let arr = [
            Arrival::new(0, 0, 100),
            Arrival::new(0, 0, 100),
            Arrival::new(500, 0, 50),
        ];
        assert_eq!(
            ns(&fluid_finish_times(&arr, &[7], B).unwrap()),
            [100.0, 200.0, 550.0]
        );
    }

    #[test]
    fn late_arrival_shares_from_its_arrival() {
        // Flow 0: 1000 B at 0. Flow 1 (same weight): 100 B at 500.
        // 0..500: flow 0 alone (500 B). 500..700: both at 1/2 (flow 1 done at 700).
        // Then flow 0 alone: 400 B left at 700 -> 1100.
        let arr = [Arrival::new(0, 0, 1000), Arrival::new(500, 1, 100)];
        let f = ns(&fluid_finish_times(&arr, &[1, 1], B).unwrap());
        assert!((f[1] - 700.0).abs() < 1e-6, "{f:?}");
        assert!((f[0] - 1100.0).abs() < 1e-6, "{f:?}");
    }

    #[test]
    fn zero_weights_and_bad_input_are_errors() {
        let arr = [Arrival::new(0, 0, 100)];
        assert!(fluid_finish_times(&arr, &[0], B).is_err());
        assert!(fluid_finish_times(&arr, &[], B).is_err());
        assert!(fluid_finish_times(&[Arrival::new(0, 1, 100)], &[1], B).is_err());
        assert!(fluid_finish_times(&[Arrival::new(0, 0, 0)], &[1], B).is_err());
        let unsorted = [Arrival::new(5, 0, 1), Arrival::new(4, 0, 1)];
        assert!(fluid_finish_times(&unsorted, &[1], B).is_err());
    }
}
