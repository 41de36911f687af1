//! What a run reports ([`BenchReport`], printed by `pspat bench --json`)
//! and the shares weighted max-min fairness predicts for each client.

use std::collections::BTreeMap;

/// Reported about once per second while running.
#[derive(Clone, Copy, Debug)]
pub struct Progress {
    /// Seconds since the measured interval began.
    pub elapsed_s: f64,
    /// Packets transmitted so far.
    pub transmitted: u64,
}

/// The result of one run (`--json` prints it).
#[derive(Clone, Debug, serde::Serialize)]
pub struct BenchReport {
    /// `pspat`, `lock` or `none`.
    pub mode: String,
    /// Algorithm name.
    pub alg: String,
    /// `dispatcher` or `client`.
    pub tx_mode: String,
    /// Greedy clients.
    pub clients: usize,
    /// T.
    pub dispatchers: usize,
    /// Length of the measured window, s.
    pub duration_s: f64,
    /// Packet length of the greedy clients.
    pub pkt_len: u32,
    /// The lmax the greedy clients' flows declare.
    pub lmax: u32,
    /// Descriptors per client (mode pspat; `None` in the other modes).
    pub descriptors_per_client: Option<usize>,
    /// Mailbox slots per client (mode pspat; `None` in the other modes).
    pub mailbox_entries: Option<usize>,
    /// Link rate, if limited.
    pub rate_bps: Option<u64>,
    /// Where threads ran.
    pub pinning: String,
    /// Packets accepted (whole run).
    pub submitted: u64,
    /// Packets transmitted (whole run, including the final drain).
    pub transmitted: u64,
    /// Packets dropped.
    pub dropped: u64,
    /// Drops by reason.
    pub dropped_by_reason: BTreeMap<String, u64>,
    /// `submitted - transmitted - dropped` at the end (0 after a clean shutdown).
    pub in_flight: u64,
    /// Packets transmitted inside the measured window per second.
    pub decisions_per_sec: f64,
    /// Bytes transmitted (whole run, including the final drain).
    pub transmitted_bytes: u64,
    /// Packets transmitted inside the measured window.
    pub window_transmitted: u64,
    /// Bytes transmitted inside the measured window.
    pub window_bytes: u64,
    /// `window_bytes` × 8 / `duration_s`, bit/s.
    pub throughput_bps: f64,
    /// Client threads (the victim included) that had been scheduled at
    /// least once when the measured window opened; the window waits for
    /// all of them, for at most 10 s.
    pub clients_running: usize,
    /// Time from releasing the clients to opening the window, s.
    pub warm_up_s: f64,
    /// Per client (the victim last).
    pub per_client: Vec<ClientReport>,
    /// Pspat mode only.
    pub arbiter: Option<ArbiterReport>,
    /// With a victim only.
    pub victim: Option<VictimReport>,
}

/// One client's outcome.
#[derive(Clone, Debug, serde::Serialize)]
pub struct ClientReport {
    /// Id (= flow id).
    pub id: usize,
    /// Weight.
    pub weight: u32,
    /// Packets accepted.
    pub submitted: u64,
    /// Packets transmitted (whole run).
    pub transmitted: u64,
    /// Bytes transmitted (whole run).
    pub bytes: u64,
    /// Packets transmitted inside the measured window.
    pub window_transmitted: u64,
    /// Bytes transmitted inside the measured window.
    pub window_bytes: u64,
    /// Fraction of the bytes transmitted inside the window.
    pub share: f64,
    /// The share weighted max-min fairness gives: weight / sum of weights,
    /// except with a victim that sends less than its weight's share, which
    /// is due what it sends, the rest being split by weight among the others.
    pub expected_share: f64,
    /// `window_bytes` × 8 / the window's length, bit/s.
    pub rate_bps: f64,
}

/// Arbiter figures.
#[derive(Clone, Debug, serde::Serialize)]
pub struct ArbiterReport {
    /// Rounds run.
    pub rounds: u64,
    /// Mean duration of a round that did work, ns.
    pub mean_round_ns: f64,
    /// Times the arbiter parked.
    pub sleeps: u64,
}

/// Victim latency percentiles, ns.
#[derive(Clone, Debug, serde::Serialize)]
#[allow(missing_docs)]
pub struct VictimReport {
    pub id: usize,
    pub weight: u32,
    pub pps: u64,
    pub samples: u64,
    pub min_ns: u64,
    pub p10_ns: u64,
    pub p50_ns: u64,
    pub p90_ns: u64,
    pub p99_ns: u64,
    pub p999_ns: u64,
    pub max_ns: u64,
}

/// Each client's share of the link under weighted max-min fairness, all
/// clients greedy except `victim = (index, measured share)`: a victim asking
/// less than its weight's share is due exactly what it sends, and the others
/// split the rest by weight; otherwise every share follows the weights.
pub(crate) fn expected_shares(weights: &[u32], victim: Option<(usize, f64)>) -> Vec<f64> {
    let total: u64 = weights.iter().map(|&w| u64::from(w)).sum();
    let by_weight = |w: u32, of: u64| {
        if of == 0 {
            0.0
        } else {
            f64::from(w) / of as f64
        }
    };
    match victim {
        Some((v, share)) if v < weights.len() && share < by_weight(weights[v], total) => {
            let others = total - u64::from(weights[v]);
            (0..weights.len())
                .map(|i| {
                    if i == v {
                        share
                    } else {
                        (1.0 - share) * by_weight(weights[i], others)
                    }
                })
                .collect()
        }
        _ => weights.iter().map(|&w| by_weight(w, total)).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::expected_shares;

    fn close(a: &[f64], b: &[f64]) -> bool {
        a.len() == b.len() && a.iter().zip(b).all(|(x, y)| (x - y).abs() < 1e-12)
    }

    #[test]
    fn greedy_clients_are_due_their_weights() {
        assert!(close(&expected_shares(&[1, 3], None), &[0.25, 0.75]));
    }

    #[test]
    fn a_light_victim_is_due_what_it_sends_and_the_rest_splits_by_weight() {
        // The demo: weights 1, 2, 4, 8 and a victim of weight 50 using 1%.
        let e = expected_shares(&[1, 2, 4, 8, 50], Some((4, 0.01)));
        let rest = 0.99 / 15.0;
        assert!(
            close(&e, &[rest, 2.0 * rest, 4.0 * rest, 8.0 * rest, 0.01]),
            "{e:?}"
        );
    }

    #[test]
    fn a_victim_asking_more_than_its_weight_is_held_to_its_weight() {
        let e = expected_shares(&[1, 1], Some((1, 0.9)));
        assert!(close(&e, &[0.5, 0.5]), "{e:?}");
    }
}
