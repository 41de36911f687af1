//! Several egress interfaces: which one carries each flow.
//!
//! A bridge with egress interfaces `0..E` (`output` first, then
//! [`crate::BridgeConfig::extra_outputs`]) runs one runtime per interface
//! (its own arbiter, scheduler, link emulator at the interface's rate,
//! dispatchers and frames) and places every flow on one interface, once, at
//! start, by weighted Highest Random Weight ([`WeightedHrw`], logarithmic
//! form; D. Guo, *Multicore Scheduling for Network Applications Based on
//! Highest Random Weight*, PhD thesis, UC Riverside, 2010, §5.1 and
//! Theorem 7.1; `docs/REFERENCE.md` §7): the digest is XXH64 of the flow id
//! ([`FlowDigest::of_u64`]), the weights are the interfaces' rates (all
//! equal when the bridge is unshaped).
//!
//! # Guarantees
//! * **A flow sticks to one interface** for the bridge's life, so its frames
//!   keep their order (each runtime keeps per-client, per-flow order) and
//!   its counters belong to one interface.
//! * **Shares.** Interface `e` carries each flow independently with
//!   probability `rate_e / Σ rate` (exact for a uniform digest), so with N
//!   flows its count is Binomial(N, rate_e / Σ rate).
//! * **Stability.** The placement is a pure function of the flow id, the
//!   interfaces' positions and rates: the same configuration places the same
//!   way on every run; adding an interface moves only the flows it wins.
//!
//! # Cost
//! O(E) weight evaluations per flow at start (E ≤ [`crate::MAX_EGRESS`]); per
//! frame one table read on the RX thread.

use pspat_sched::place::{FlowDigest, WeightForm, WeightedHrw};

use crate::config::{BridgeConfig, BridgeError, Egress};

/// The placement weight of each egress interface: its rate, or 1 when the
/// bridge is unshaped.
pub fn egress_weights(egress: &[Egress]) -> Vec<f64> {
    egress
        .iter()
        .map(|e| e.rate_bps.map_or(1.0, |r| r as f64))
        .collect()
}

/// The egress interface (position in [`BridgeConfig::egress`]) of every
/// flow `0..cfg.flows` (module docs).
///
/// # Errors
/// [`BridgeError::Config`] when the configuration is invalid
/// ([`BridgeConfig::validate`]).
///
/// # Examples
/// ```
/// use pspat_bridge::{BridgeConfig, Egress};
/// let mut cfg = BridgeConfig::new("pspat-in", "pspat-out0");
/// cfg.extra_outputs.push(Egress::new("pspat-out1"));
/// cfg.flows = 1000;
/// let at = pspat_bridge::egress::placement(&cfg).unwrap();
/// let second = at.iter().filter(|&&e| e == 1).count();
/// assert!((400..600).contains(&second));
/// ```
pub fn placement(cfg: &BridgeConfig) -> Result<Vec<usize>, BridgeError> {
    cfg.validate()?;
    let egress = cfg.egress();
    if egress.len() == 1 {
        return Ok(vec![0; cfg.flows as usize]);
    }
    let ids = (0..egress.len() as u32).collect();
    let hrw =
        WeightedHrw::new(ids, &egress_weights(&egress), WeightForm::Logarithmic).map_err(|e| {
            BridgeError::Config {
                field: "output",
                message: format!("egress placement: {e}"),
            }
        })?;
    Ok((0..u64::from(cfg.flows))
        .map(|f| hrw.decide(FlowDigest::of_u64(f)))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(rates: &[u64], flows: u32) -> BridgeConfig {
        let mut cfg = BridgeConfig::new("pspat-in", "pspat-e0");
        cfg.rate_bps = Some(rates[0]);
        for (i, &r) in rates.iter().enumerate().skip(1) {
            let mut e = Egress::new(format!("pspat-e{i}"));
            e.rate_bps = Some(r);
            cfg.extra_outputs.push(e);
        }
        cfg.flows = flows;
        cfg
    }

    #[test]
    fn one_egress_carries_every_flow() {
        let at = placement(&cfg(&[1_000_000], 100)).unwrap();
        assert_eq!(at, vec![0; 100]);
    }

    #[test]
    fn shares_follow_the_rates_within_a_binomial_bound() {
        // 65536 flows, rates 1:3: egress 0's count is Binomial(n, 1/4);
        // 4 standard deviations (about 1 in 15 000 two-sided) as the bound.
        let n = 65_536u32;
        let at = placement(&cfg(&[100_000_000, 300_000_000], n)).unwrap();
        let first = at.iter().filter(|&&e| e == 0).count() as f64;
        let (mean, sd) = (f64::from(n) / 4.0, (f64::from(n) * 0.25 * 0.75).sqrt());
        assert!(
            (first - mean).abs() <= 4.0 * sd,
            "{first} flows on the slower link, expected {mean} ± {}",
            4.0 * sd
        );
        assert!(at.iter().all(|&e| e < 2));
    }

    #[test]
    fn adding_an_egress_moves_only_the_flows_it_wins() {
        let two = placement(&cfg(&[1_000_000, 1_000_000], 4096)).unwrap();
        let three = placement(&cfg(&[1_000_000, 1_000_000, 1_000_000], 4096)).unwrap();
        let mut moved = 0;
        for (a, b) in two.iter().zip(&three) {
            if a != b {
                assert_eq!(*b, 2, "a flow moved between old interfaces");
                moved += 1;
            }
        }
        // About a third moves (Binomial(4096, 1/3): sd ≈ 30).
        assert!((1165..=1565).contains(&moved), "{moved} of 4096 moved");
    }

    #[test]
    fn placement_is_the_same_on_every_call() {
        let c = cfg(&[5_000_000, 7_000_000, 9_000_000], 1000);
        assert_eq!(placement(&c).unwrap(), placement(&c).unwrap());
    }
}
