//! Workloads for the WFI measurements: named traffic patterns generated
//! into a [`Scenario`], the arrivals (time, flow, length) that
//! [`crate::wfi`] feeds to a scheduler on an ideal link, and the checks of
//! their parameters.
//!
//! Generation is deterministic: the same workload, parameters and seed
//! always give the same arrivals, for every algorithm alike.
//!
//! # Workloads ([`Workload`])
//! * `greedy`: every flow stays backlogged: a burst at t = 0 of
//!   4 + 2·⌈w_k/w_min⌉ packets (at most 1024), then packets at exactly its
//!   fluid share of the link, so the fluid backlog never empties.
//! * `onoff`: every flow alternates bursts of 1..=32 back-to-back packets at
//!   line rate with random silences; each flow offers 95% of its share.
//! * `victim`: flow 0 (weight 50 unless given) sends single packets about
//!   every 250 µs (uniform 125–375 µs), the PSPAT journal paper's 4 kpps
//!   victim (§6.6), among greedy flows that share the rest of the link by
//!   weight.
//! * `paper`: the PSPAT journal paper's §5.2 example. Fixed: 10 Gbit/s,
//!   1500-byte packets, 20 ms, N = 25 or 100 flows, weights summing to 200:
//!   flow 0 has weight 100 (φ = 0.5), flow 1 weight 1 (φ_min = 0.005), and
//!   the other N − 2 flows split 99 as evenly as possible
//!   ([`paper_weights`]: N = 25 gives seven 5s and sixteen 4s, N = 100 one 2
//!   and ninety-seven 1s). Flow 0 is an on/off client offering a quarter of
//!   the link in bursts of 1..=4 packets; all others are greedy (the
//!   bounds of flow 0 are listed in [`crate::wfi`]).
//!
//! # Complexity
//! O(P log P) for P packets (the final sort by time); O(P + N) memory.

use crate::fluid::{Arrival, TICKS_PER_BYTE};
use pspat_sched::rate::Rate;
use pspat_sched::{ConfigError, FlowParams, FlowTable, MAX_PACKET_LEN};

/// Largest number of flows a WFI workload may have.
pub const MAX_FLOWS: usize = 65_536;
/// Largest number of packets a WFI run may simulate.
pub const MAX_PACKETS: u64 = 10_000_000;
/// Longest workload, in ns (10 s).
pub const MAX_DURATION_NS: u64 = 10_000_000_000;
/// Highest link rate accepted, in bit/s: that of any [`Rate`] (1 Tbit/s).
pub const MAX_RATE_BPS: u64 = pspat_sched::rate::MAX_RATE_BPS;
/// The `paper` scenario's link rate (10 Gbit/s).
pub const PAPER_RATE_BPS: u64 = 10_000_000_000;
/// The `paper` scenario's packet length in bytes.
pub const PAPER_PKT_LEN: u32 = 1_500;
/// The `paper` scenario's duration in ns (20 ms).
pub const PAPER_DURATION_NS: u64 = 20_000_000;
/// Default weight of the `victim` flow (50× the others, as in the PSPAT journal paper §6.6).
pub const VICTIM_WEIGHT: u32 = 50;
/// Mean gap between the `victim`'s packets in ns (4 kpps).
pub const VICTIM_PERIOD_NS: u64 = 250_000;

/// A traffic pattern; flow i has weight `weights[i]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Workload {
    /// Every flow permanently backlogged.
    Greedy {
        /// One weight per flow.
        weights: Vec<u32>,
    },
    /// Bursts at line rate separated by random silences, 95% of each share.
    OnOff {
        /// One weight per flow.
        weights: Vec<u32>,
    },
    /// Flow 0 sends single packets at 4 kpps among greedy flows.
    Victim {
        /// One weight per flow; `weights[0]` is the victim's.
        weights: Vec<u32>,
    },
    /// The PSPAT journal paper's §5.2 example, 25 or 100 flows.
    Paper {
        /// 25 or 100.
        flows: u32,
    },
}

impl Workload {
    /// The names [`Workload::from_name`] accepts.
    pub const NAMES: &'static str = "greedy, onoff, victim, paper";

    /// The workload's name as printed in reports.
    pub fn name(&self) -> &'static str {
        match self {
            Workload::Greedy { .. } => "greedy",
            Workload::OnOff { .. } => "onoff",
            Workload::Victim { .. } => "victim",
            Workload::Paper { .. } => "paper",
        }
    }

    /// Builds a workload by name. `weights` is ignored by `paper`, whose
    /// `flows` must be 25 or 100; the others take one weight per flow.
    ///
    /// # Errors
    /// An unknown name or, for `paper`, a flow count other than 25 or 100.
    ///
    /// # Examples
    /// ```
    /// use pspat_eval::workload::Workload;
    /// assert_eq!(Workload::from_name("paper", 100, vec![]).unwrap(), Workload::Paper { flows: 100 });
    /// assert!(Workload::from_name("paper", 7, vec![]).is_err());
    /// ```
    pub fn from_name(name: &str, flows: u32, weights: Vec<u32>) -> Result<Self, ConfigError> {
        Ok(match name.trim().to_ascii_lowercase().as_str() {
            "greedy" => Workload::Greedy { weights },
            "onoff" | "on-off" | "on/off" => Workload::OnOff { weights },
            "victim" => Workload::Victim { weights },
            "paper" => {
                paper_weights(flows)?;
                Workload::Paper { flows }
            }
            _ => {
                return Err(ConfigError::invalid(
                    format!("workload {name:?}"),
                    format!("unknown (known: {})", Self::NAMES),
                ))
            }
        })
    }
}

/// The `paper` scenario's weights: Σ = 200, flow 0 has 100 (φ = 0.5),
/// flow 1 has 1 (φ_min = 0.005), the other `flows − 2` split 99 as evenly as
/// possible, larger shares first.
///
/// # Errors
/// `flows` other than 25 or 100.
///
/// # Examples
/// ```
/// use pspat_eval::workload::paper_weights;
/// let w = paper_weights(25).unwrap();
/// assert_eq!(w.iter().sum::<u32>(), 200);
/// assert_eq!((w[0], w[1], w[2], w[24]), (100, 1, 5, 4));
/// ```
pub fn paper_weights(flows: u32) -> Result<Vec<u32>, ConfigError> {
    if flows != 25 && flows != 100 {
        return Err(ConfigError::out_of_range(
            "paper scenario flows",
            flows,
            "25 or 100",
        ));
    }
    let rest = flows - 2;
    let (base, extra) = (99 / rest, 99 % rest);
    let mut w = vec![100, 1];
    w.extend((0..rest).map(|j| base + u32::from(j < extra)));
    Ok(w)
}

/// Link and size parameters of a workload (the `paper` scenario fixes its
/// own rate, length and duration and ignores these, except `seed`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WorkloadParams {
    /// Link rate B in bit/s, 1000..=10¹².
    pub rate_bps: u64,
    /// Packet length in bytes (every flow's lmax), 1..=65535.
    pub pkt_len: u32,
    /// Arrivals are generated over `[0, duration_ns)`, 1..=10¹⁰ ns.
    pub duration_ns: u64,
    /// Keep only the first this many arrivals (1..=10⁷), if set.
    pub max_packets: Option<u64>,
    /// Seed of the random generators.
    pub seed: u64,
}

impl Default for WorkloadParams {
    /// 10 Gbit/s, 1500 bytes, 20 ms, no packet cap, seed 1.
    fn default() -> Self {
        WorkloadParams {
            rate_bps: PAPER_RATE_BPS,
            pkt_len: PAPER_PKT_LEN,
            duration_ns: PAPER_DURATION_NS,
            max_packets: None,
            seed: 1,
        }
    }
}

/// A generated workload: flows, link and the arrivals, sorted by time.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Scenario {
    /// Workload name.
    pub workload: &'static str,
    /// Weight of each flow.
    pub weights: Vec<u32>,
    /// Largest packet of each flow, bytes.
    pub lmax: Vec<u32>,
    /// Link rate, bit/s.
    pub rate_bps: u64,
    /// Every packet, sorted by arrival time.
    pub arrivals: Vec<Arrival>,
}

pub(crate) fn check_weights(weights: &[u32]) -> Result<(), ConfigError> {
    if weights.is_empty() {
        return Err(ConfigError::invalid(
            "weights",
            "empty: give one weight per flow (total weight must be positive)",
        ));
    }
    if weights.len() > MAX_FLOWS {
        return Err(ConfigError::out_of_range(
            "number of flows",
            weights.len(),
            format!("1..={MAX_FLOWS}"),
        ));
    }
    for (i, &w) in weights.iter().enumerate() {
        ConfigError::check_range(
            format!("weight of flow {i}"),
            w,
            pspat_sched::MIN_WEIGHT..=pspat_sched::MAX_WEIGHT,
        )?;
    }
    Ok(())
}

fn check_params(p: &WorkloadParams) -> Result<(), ConfigError> {
    Rate::checked("link rate (bit/s)", p.rate_bps)?;
    ConfigError::check_range("packet length (bytes)", p.pkt_len, 1..=MAX_PACKET_LEN)?;
    ConfigError::check_range("duration (ns)", p.duration_ns, 1..=MAX_DURATION_NS)?;
    if let Some(n) = p.max_packets {
        ConfigError::check_range("packets", n, 1..=MAX_PACKETS)?;
    }
    Ok(())
}

/// Arrival generator state shared by the traffic shapes.
struct Gen {
    out: Vec<Arrival>,
    rate: u128,
    horizon: u64,
    limit: u64,
}

impl Gen {
    fn push(&mut self, time_ns: u64, flow: usize, len: u32) -> Result<(), ConfigError> {
        if self.out.len() as u64 >= self.limit {
            return Err(ConfigError::out_of_range(
                "generated packets",
                format!("more than {}", self.limit),
                format!(
                    "1..={} (shorten the duration or lower the rate)",
                    self.limit
                ),
            ));
        }
        self.out.push(Arrival::new(time_ns, flow as u32, len));
        Ok(())
    }

    /// ns to send `n` packets of `len` bytes at `num/den` of the link, exact floor.
    fn spacing(&self, n: u128, len: u32, num: u128, den: u128) -> u64 {
        (n * u128::from(len) * TICKS_PER_BYTE * den / (num * self.rate)) as u64
    }

    /// A burst at t = 0, then one packet every `len/(share·B)`.
    fn greedy(
        &mut self,
        flow: usize,
        len: u32,
        burst: u32,
        share_num: u128,
        share_den: u128,
    ) -> Result<(), ConfigError> {
        for _ in 0..burst {
            self.push(0, flow, len)?;
        }
        for m in 1u128.. {
            let t = self.spacing(m, len, share_num, share_den);
            if t >= self.horizon {
                break;
            }
            self.push(t, flow, len)?;
        }
        Ok(())
    }

    /// Bursts of 1..=`max_burst` packets at line rate; silences drawn so the
    /// flow offers `load` of the link on average.
    fn onoff(
        &mut self,
        rng: &mut fastrand::Rng,
        flow: usize,
        len: u32,
        max_burst: u32,
        load: f64,
    ) -> Result<(), ConfigError> {
        let pkt_ns = len as f64 * 8e9 / self.rate as f64;
        let mean_burst = (1 + max_burst) as f64 / 2.0;
        let cycle = mean_burst * pkt_ns / load;
        let mean_off = (cycle - mean_burst * pkt_ns).max(0.0);
        let mut t = rng.f64() * cycle;
        while (t as u64) < self.horizon {
            let start = t as u64;
            let n = rng.u32(1..=max_burst);
            for j in 0..n {
                let at = start + self.spacing(u128::from(j), len, 1, 1);
                if at >= self.horizon {
                    break;
                }
                self.push(at, flow, len)?;
            }
            t += n as f64 * pkt_ns + rng.f64() * 2.0 * mean_off;
        }
        Ok(())
    }
}

impl Scenario {
    /// Generates the arrivals of `workload` with `params` (see the module
    /// docs for each shape); the same inputs always give the same arrivals.
    ///
    /// # Errors
    /// Weights outside 1..=65536 or an empty list (a zero total weight),
    /// more than 65536 flows, a parameter out of its range, or more than
    /// 10⁷ packets generated.
    pub fn generate(workload: &Workload, params: &WorkloadParams) -> Result<Self, ConfigError> {
        let mut p = *params;
        if let Workload::Paper { .. } = workload {
            p.rate_bps = PAPER_RATE_BPS;
            p.pkt_len = PAPER_PKT_LEN;
            p.duration_ns = PAPER_DURATION_NS;
            p.max_packets = None;
        }
        check_params(&p)?;
        let weights = match workload {
            Workload::Greedy { weights }
            | Workload::OnOff { weights }
            | Workload::Victim { weights } => weights.clone(),
            Workload::Paper { flows } => paper_weights(*flows)?,
        };
        check_weights(&weights)?;
        let len = p.pkt_len;
        let mut gen = Gen {
            out: Vec::new(),
            rate: u128::from(p.rate_bps),
            horizon: p.duration_ns,
            limit: MAX_PACKETS,
        };
        let mut rng = fastrand::Rng::with_seed(p.seed);
        let wmin = weights.iter().copied().min().unwrap_or(1);
        let burst_of = |w: u32| (4 + 2 * w.div_ceil(wmin)).min(1024);
        let wsum: u128 = weights.iter().map(|&w| u128::from(w)).sum();
        match workload {
            Workload::Greedy { .. } => {
                for (k, &w) in weights.iter().enumerate() {
                    gen.greedy(k, len, burst_of(w), u128::from(w), wsum)?;
                }
            }
            Workload::OnOff { .. } => {
                for (k, &w) in weights.iter().enumerate() {
                    let load = 0.95 * f64::from(w) / wsum as f64;
                    gen.onoff(&mut rng, k, len, 32, load)?;
                }
            }
            Workload::Victim { .. } | Workload::Paper { .. } => {
                let others = wsum - u128::from(weights[0]);
                if let Workload::Victim { .. } = workload {
                    let mut t = rng.u64(0..VICTIM_PERIOD_NS);
                    while t < gen.horizon {
                        gen.push(t, 0, len)?;
                        t += rng.u64(VICTIM_PERIOD_NS / 2..=VICTIM_PERIOD_NS * 3 / 2);
                    }
                } else {
                    gen.onoff(&mut rng, 0, len, 4, 0.25)?;
                }
                for (k, &w) in weights.iter().enumerate().skip(1) {
                    gen.greedy(k, len, burst_of(w), u128::from(w), others)?;
                }
            }
        }
        let mut arrivals = gen.out;
        // Stable: packets of one flow keep their generation order.
        arrivals.sort_by_key(|a| (a.time_ns, a.flow));
        if let Some(n) = p.max_packets {
            arrivals.truncate(n as usize);
        }
        Ok(Scenario {
            workload: workload.name(),
            lmax: vec![len; weights.len()],
            weights,
            rate_bps: p.rate_bps,
            arrivals,
        })
    }

    /// The flow table (weights and lmax, priority 0) for building a scheduler.
    ///
    /// # Errors
    /// Invalid weights or lengths (not possible for a generated scenario).
    pub fn flow_table(&self) -> Result<FlowTable, ConfigError> {
        FlowTable::new(
            self.weights
                .iter()
                .zip(&self.lmax)
                .map(|(&weight, &lmax)| FlowParams {
                    weight,
                    lmax,
                    priority: 0,
                })
                .collect(),
        )
    }
}
