//! Measuring service guarantees: one ideal link, any [`Scheduler`], and the
//! exact fluid reference of [`crate::fluid`] for the same arrivals.
//!
//! `REFERENCE.md` §3.1, §3.3 and §3.5; PSPAT journal paper §2.5 and §5.2.
//!
//! # The simulation
//! A discrete-event model of one link of rate B that sends one packet at a
//! time and never idles while the scheduler holds packets. Arrivals are
//! enqueued at their own times (all those up to a decision instant are
//! enqueued, in order, before the decision); at each departure instant the
//! scheduler is asked for the next packet. Time is kept exactly, in ticks of
//! 1/B ns, so a packet of `len` bytes takes exactly `len·8·10⁹` ticks and no
//! rounding accumulates (the scheduler's `now` is the tick time rounded
//! down to a ns). The workload is generated first and is the same for every
//! algorithm; the scheduler is given room for every packet, so nothing drops.
//!
//! # What is measured, per flow k (φ_k = w_k/Σw over all flows)
//! * **`max_twfi_ns`**, the Bennett–Zhang form that the published bounds use
//!   (`REFERENCE.md` §3.1): the maximum over k's packets of
//!   e = d − a − Q_k(a)/(φ_k·B), where d is the end of transmission and
//!   Q_k(a) the bytes of k in the system just after the arrival: the packet
//!   itself, the packets waiting, and a packet of k still on the wire (counted
//!   whole, as it has not left). This is the value compared with the bound.
//! * **`max_lag_ns`**: the maximum of d − d_fluid, the lag behind the exact
//!   GPS system fed the same arrivals (diagnostic; can be negative).
//! * **`max_bwfi_bytes`**: the maximum over intervals [t1, t2] during which k
//!   stays backlogged (from an arrival that finds k empty until the end of
//!   transmission of its last packet) of φ_k·W(t1, t2) − W_k(t1, t2), where
//!   W is the link's service and W_k k's, both counted bit by bit as they
//!   leave the wire (`REFERENCE.md` §3.1). The difference is piecewise
//!   linear and only turns at the start and end of k's own transmissions
//!   and at the start of a backlogged period, so evaluating it there (with
//!   the running minimum since the period began) gives the exact maximum. It
//!   improves on the FreeBSD harness's estimator (§3.4), which samples only
//!   the ends of backlogged periods.
//!
//! # Bounds (by algorithm name, [`twfi_bound`])
//! With L_k the flow's largest packet (its lmax), L the largest of all, N
//! the number of flows and φ_min the smallest normalized weight:
//! * `qfq`: 6·L_k/(φ_k·B) + (L − L_k)/B (PSPAT journal paper eq. 2, from
//!   Rizzo and Valente, Comput. Commun. 67, 2015).
//! * `qfq+`: 8·L_k/(φ_k·B) + (L_turn + L)/B, where L_turn is the largest
//!   aggregate budget n·L_j (flows of equal weight and lmax, at most
//!   [`AGG_MAX_FLOWS`] to an aggregate, grouped as [`pspat_sched::QfqPlus`]
//!   groups them). QFQ's form does not hold for QFQ+: an aggregate keeps
//!   the link for a whole turn (up to 8 packets of another flow) and its
//!   flows share it by DRR, so a heavy flow behind an aggregate of 8 light
//!   ones waits longer than QFQ's one packet (the victim workload with
//!   weights 65536,1,…,1 measures 9.5 µs against QFQ's 7.2 µs at
//!   10 Gbit/s). The derivation, term by term, is in the module docs of
//!   [`pspat_sched::qfq_plus`].
//! * `drr`: (1/φ_min + 1/φ_k + N − 1)·L/B (eq. 3). The formula assumes
//!   quanta proportional to the weights with the smallest one equal to L, so
//!   [`scheduler_config`] sets DRR's quantum unit to ⌈L/w_min⌉ bytes.
//! * `wf2q+`: L_k/(φ_k·B) + L/B. Derivation: a packet's finish tag lies
//!   L_k/φ_k of virtual time past its start tag, which the virtual clock
//!   (advancing at least at the fluid rate) covers within L_k/(φ_k·B) of the
//!   arrival plus the time to drain Q_k(a) at φ_k·B; eligibility lets a
//!   packet already on the wire delay it by at most one maximum packet, L/B.
//!   This is the latency of WF²Q+ as a latency-rate server; it is an upper
//!   bound, not the tightest one published. It assumes V grows with the
//!   link's work, so [`run`] gives WF²Q+ the link rate
//!   ([`pspat_sched::Wf2qPlus::with_link_rate`]); without it the scheduler only
//!   guarantees L_k/(φ_k·B) + 2·L/B (the `wf2q_plus` module docs).
//! * any other name (`fifo`, `prio`): no bound (`None`, JSON `null`).
//!
//! # Workloads ([`Workload`])
//! * `greedy`: every flow stays backlogged: a burst at t = 0 of
//!   4 + 2·⌈w_k/w_min⌉ packets (at most 1024), then packets at exactly its
//!   fluid share of the link, so the fluid backlog never empties.
//! * `onoff`: every flow alternates bursts of 1..=32 back-to-back packets at
//!   line rate with random silences; each flow offers 95% of its share.
//! * `victim`: flow 0 (weight 50 unless given) sends single packets about
//!   every 250 µs (uniform 125–375 µs), the PSPAT journal paper's 4 kpps victim (§6.6), among greedy
//!   flows that share the rest of the link by weight.
//! * `paper`: the PSPAT journal paper's §5.2 example. Fixed: 10 Gbit/s,
//!   1500-byte packets, 20 ms, N = 25 or 100 flows, weights summing to 200:
//!   flow 0 has weight 100 (φ = 0.5), flow 1 weight 1 (φ_min = 0.005), and
//!   the other N − 2 flows split 99 as evenly as possible
//!   ([`paper_weights`]: N = 25 gives seven 5s and sixteen 4s, N = 100 one 2
//!   and ninety-seven 1s). Flow 0 is an on/off client offering a quarter of
//!   the link in bursts of 1..=4 packets; all others are greedy. Bounds for
//!   flow 0: QFQ 12·L/B = 14.4 µs; DRR 226·L/B = 271.2 µs at N = 25 and
//!   301·L/B = 361.2 µs at N = 100 (L/B = 1.2 µs).
//!
//! # Complexity
//! O(P log P) for P packets (the fluid reference's heap and the workload's
//! sort) plus the scheduler's own cost; O(P + N) memory. A measurement tool:
//! it allocates, but reads no clock and spawns no thread.
//!
//! # Example
//! ```
//! use pspat_eval::wfi::{self, Scenario, Workload, WorkloadParams};
//! use pspat_sched::AlgKind;
//! let scenario = Scenario::generate(&Workload::Paper { flows: 25 }, &WorkloadParams::default()).unwrap();
//! let run = wfi::run(AlgKind::Drr, &scenario).unwrap();
//! let heavy = &run.report.per_flow[0];
//! assert_eq!(heavy.bound_twfi_ns, Some(271_200.0));
//! assert_eq!(heavy.within_bound, Some(true));
//! ```

use serde::Serialize;

use crate::fluid::{fluid_finish_times, ticks_to_ns, Arrival, TICKS_PER_BYTE};
use pspat_sched::qfq_plus::AGG_MAX_FLOWS;
use pspat_sched::rate::Rate;
use pspat_sched::{
    AlgKind, ConfigError, FlowId, FlowParams, FlowTable, Instant, Packet, Scheduler,
    SchedulerConfig, MAX_PACKET_LEN,
};

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
    /// use pspat_eval::wfi::Workload;
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
/// use pspat_eval::wfi::paper_weights;
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

fn check_weights(weights: &[u32]) -> Result<(), ConfigError> {
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

/// The configuration [`run`] builds `alg` with: room for every packet of the
/// scenario, DRR's quantum unit ⌈L/w_min⌉, so the smallest quantum covers
/// the largest packet as the DRR bound assumes, and the scenario's link rate
/// as WF²Q+'s hint ([`pspat_sched::Wf2qPlus::with_link_rate`]), so its virtual time
/// follows the link and its one-packet bound applies.
pub fn scheduler_config(alg: AlgKind, scenario: &Scenario) -> SchedulerConfig {
    let mut cfg = SchedulerConfig::new(alg);
    cfg.capacity = scenario.arrivals.len().max(1);
    let l = scenario.lmax.iter().copied().max().unwrap_or(1);
    let wmin = scenario.weights.iter().copied().min().unwrap_or(1).max(1);
    cfg.quantum_unit = l.div_ceil(wmin).max(1);
    cfg.link_rate_bps = Some(scenario.rate_bps);
    cfg
}

/// An analytical T-WFI bound, an exact rational number of link ticks
/// (1 tick = 1/B ns): `num / den`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TwfiBound {
    num: u128,
    den: u128,
}

impl TwfiBound {
    /// The bound in ns on a link of `rate_bps`.
    ///
    /// # Examples
    /// ```
    /// use pspat_eval::wfi::twfi_bound;
    /// let b = twfi_bound("qfq", 0, &[1, 1], &[1500, 1500]).unwrap();
    /// assert_eq!(b.ns(10_000_000_000), 2.0 * 6.0 * 1200.0);
    /// ```
    pub fn ns(&self, rate_bps: u64) -> f64 {
        let whole = self.num / self.den;
        let frac = (self.num % self.den) as f64 / self.den as f64;
        ticks_to_ns(whole, rate_bps) + frac / rate_bps.max(1) as f64
    }

    /// True when `e_num / w` ticks is within the bound.
    fn admits(&self, e_num: i128, w: u128) -> bool {
        let Ok(e) = u128::try_from(e_num) else {
            return true; // negative: early
        };
        match (e.checked_mul(self.den), self.num.checked_mul(w)) {
            (Some(l), Some(r)) => l <= r,
            _ => (e as f64 / w as f64) <= (self.num as f64 / self.den as f64),
        }
    }
}

/// The published T-WFI bound of the algorithm called `alg` for `flow`,
/// given every flow's weight and lmax; `None` for algorithms without one
/// (FIFO, PRIO, unknown names). See the module docs for the formulas.
///
/// # Examples
/// ```
/// use pspat_eval::wfi::{paper_weights, twfi_bound};
/// let w = paper_weights(100).unwrap();
/// let l = vec![1500; 100];
/// assert_eq!(twfi_bound("drr", 0, &w, &l).unwrap().ns(10_000_000_000), 361_200.0);
/// assert!(twfi_bound("fifo", 0, &w, &l).is_none());
/// ```
pub fn twfi_bound(alg: &str, flow: usize, weights: &[u32], lmax: &[u32]) -> Option<TwfiBound> {
    let wk = u128::from(*weights.get(flow)?);
    let lk = u128::from(*lmax.get(flow)?);
    let wsum: u128 = weights.iter().map(|&w| u128::from(w)).sum();
    let l = u128::from(lmax.iter().copied().max()?);
    let wmin = u128::from(weights.iter().copied().min()?);
    let n = weights.len() as u128;
    if wk == 0 || wmin == 0 {
        return None;
    }
    let tpb = TICKS_PER_BYTE;
    let (num, den) = match alg.trim().to_ascii_lowercase().as_str() {
        // 6·L_k/(φ_k B) + (L − L_k)/B, φ_k = w_k/W.
        "qfq" => (6 * lk * tpb * wsum + (l - lk) * tpb * wk, wk),
        // 8·L_k/(φ_k B) + (L_turn + L)/B.
        "qfq+" | "qfqp" => {
            let turn = u128::from(qfq_plus_turn_max(weights, lmax));
            (8 * lk * tpb * wsum + (turn + l) * tpb * wk, wk)
        }
        // (W/w_min + W/w_k + N − 1)·L/B.
        "drr" | "rr" => (
            (wsum * wk + wsum * wmin + (n - 1) * wmin * wk) * l * tpb,
            wmin * wk,
        ),
        // L_k/(φ_k B) + L/B.
        "wf2q+" | "wf2qp" | "wf2q" => (lk * tpb * wsum + l * tpb * wk, wk),
        _ => return None,
    };
    Some(TwfiBound { num, den })
}

/// The largest budget of a QFQ+ aggregate over these flows, in bytes: flows
/// of equal (weight, lmax) form aggregates of up to [`AGG_MAX_FLOWS`] flows
/// (as [`pspat_sched::QfqPlus::new`] forms them), and an aggregate of n
/// flows may keep the link for a turn of n·lmax bytes.
///
/// # Examples
/// ```
/// use pspat_eval::wfi::qfq_plus_turn_max;
/// // Nine flows of weight 1: aggregates of 8 and 1; the heavy flow is alone.
/// let mut w = vec![65_536];
/// w.extend([1; 9]);
/// assert_eq!(qfq_plus_turn_max(&w, &[1500; 10]), 8 * 1500);
/// assert_eq!(qfq_plus_turn_max(&[1, 2, 3], &[100, 9000, 64]), 9000);
/// ```
pub fn qfq_plus_turn_max(weights: &[u32], lmax: &[u32]) -> u64 {
    let mut keys: Vec<(u32, u32)> = weights.iter().copied().zip(lmax.iter().copied()).collect();
    keys.sort_unstable();
    keys.chunk_by(|a, b| a == b)
        .map(|same| {
            let n = same.len().min(AGG_MAX_FLOWS as usize) as u64;
            n * u64::from(same[0].1)
        })
        .max()
        .unwrap_or(0)
}

/// Per-flow results of a WFI run.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FlowWfi {
    /// Flow index.
    pub flow: u32,
    /// Configured weight.
    pub weight: u32,
    /// Normalized weight w/Σw.
    pub phi: f64,
    /// Packets of this flow.
    pub packets: u64,
    /// Worst Bennett–Zhang T-WFI sample max(d − a − Q_k(a)/(φ_k·B)), ns;
    /// `None` if the flow sent nothing.
    pub max_twfi_ns: Option<f64>,
    /// Worst lag behind the fluid reference, max(d − d_fluid), ns.
    pub max_lag_ns: Option<f64>,
    /// Worst B-WFI, bytes (0 if the flow sent nothing).
    pub max_bwfi_bytes: f64,
    /// The algorithm's T-WFI bound for this flow, ns; `None` without one.
    pub bound_twfi_ns: Option<f64>,
    /// `max_twfi_ns <= bound_twfi_ns` (exact comparison); `None` without a bound.
    pub within_bound: Option<bool>,
}

/// The result of [`simulate`]; serialized by `pspat wfi --json`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct WfiReport {
    /// Version of this layout.
    pub schema_version: u32,
    /// The scheduler's name.
    pub alg: String,
    /// The workload's name.
    pub workload: String,
    /// Link rate, bit/s.
    pub rate_bps: u64,
    /// Number of flows.
    pub flows: usize,
    /// Number of packets simulated.
    pub packets: u64,
    /// Every flow that has a bound is within it (true when none has one).
    pub all_within_bound: bool,
    /// One entry per flow, by flow index.
    pub per_flow: Vec<FlowWfi>,
}

/// One packet of the trace (`pspat wfi --trace` writes these as CSV).
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct TraceRow {
    /// Flow index.
    pub flow: u32,
    /// The flow's weight.
    pub weight: u32,
    /// Length in bytes.
    pub len: u32,
    /// Arrival time, ns.
    pub arrival_ns: u64,
    /// End of transmission on the link, ns (exact, may be fractional).
    pub departure_ns: f64,
    /// Departure in the fluid reference, ns.
    pub fluid_finish_ns: f64,
}

impl TraceRow {
    /// The CSV header matching [`TraceRow::csv`].
    pub const CSV_HEADER: &'static str = "flow,weight,len,arrival_ns,departure_ns,fluid_finish_ns";

    /// The row as CSV, times with three decimals (ps).
    ///
    /// # Examples
    /// ```
    /// use pspat_eval::wfi::TraceRow;
    /// let r = TraceRow { flow: 1, weight: 2, len: 100, arrival_ns: 5, departure_ns: 85.0, fluid_finish_ns: 105.5 };
    /// assert_eq!(r.csv(), "1,2,100,5,85.000,105.500");
    /// ```
    pub fn csv(&self) -> String {
        format!(
            "{},{},{},{},{:.3},{:.3}",
            self.flow,
            self.weight,
            self.len,
            self.arrival_ns,
            self.departure_ns,
            self.fluid_finish_ns
        )
    }
}

/// A report and its per-packet trace (in arrival order).
#[derive(Clone, Debug, PartialEq)]
pub struct WfiRun {
    /// The per-flow results.
    pub report: WfiReport,
    /// One row per packet, in arrival order.
    pub trace: Vec<TraceRow>,
}

/// Builds `alg` with [`scheduler_config`] (WF²Q+ with the scenario's link
/// rate) and [`simulate`]s `scenario`.
///
/// # Errors
/// As [`simulate`], or the scheduler refusing the configuration.
pub fn run(alg: AlgKind, scenario: &Scenario) -> Result<WfiRun, ConfigError> {
    let mut sched = scheduler_config(alg, scenario).build(scenario.flow_table()?)?;
    simulate(&mut sched, scenario)
}

struct InFlight {
    idx: usize,
    end: u128,
}

/// Per-flow accumulators of the simulation.
struct FlowAcc {
    sys_bytes: u64,
    sys_pkts: u32,
    served: u128,
    run_min: i128,
    bwfi: i128,
    twfi: Option<i128>,
    lag: Option<i128>,
    packets: u64,
}

/// Runs `scenario` through `sched` on the ideal link and measures every
/// flow against the fluid reference and its algorithm's bound (chosen by
/// `sched.name()`). `sched` must be empty and configured with the
/// scenario's flows; packet tokens are the arrival indices.
///
/// # Errors
/// The scenario's weights or arrivals are invalid; the scheduler refuses a
/// packet (it must have room for all); it returns `None` while holding
/// packets (only work-conserving schedulers can be measured) or hands back
/// a packet it was not given.
pub fn simulate<S: Scheduler + ?Sized>(
    sched: &mut S,
    scenario: &Scenario,
) -> Result<WfiRun, ConfigError> {
    let arrivals = &scenario.arrivals;
    let weights = &scenario.weights;
    let rate = scenario.rate_bps;
    check_weights(weights)?;
    let fluid = fluid_finish_times(arrivals, weights, rate)?;
    let b = u128::from(rate);
    let wsum: u128 = weights.iter().map(|&w| u128::from(w)).sum();
    let n = arrivals.len();
    let a_ticks = |i: usize| u128::from(arrivals[i].time_ns) * b;
    let name = sched.name();
    let mut acc: Vec<FlowAcc> = weights
        .iter()
        .map(|_| FlowAcc {
            sys_bytes: 0,
            sys_pkts: 0,
            served: 0,
            run_min: 0,
            bwfi: 0,
            twfi: None,
            lag: None,
            packets: 0,
        })
        .collect();
    let mut q_at = vec![0u64; n];
    let mut depart: Vec<Option<u128>> = vec![None; n];
    let mut s_done: u128 = 0; // link service in ticks, in-flight packet included
    let mut in_flight: Option<InFlight> = None;
    let mut t_free: u128 = 0;
    let mut i = 0;
    let ns_of = |t: u128| Instant::from_nanos((t / b) as u64);

    // φ_k·W(t) − W_k(t), scaled by W·ticks-per-byte: w_k·S(t) − W·S_k(t).
    let d_of =
        |w: u32, s: u128, s_k: u128| -> i128 { (u128::from(w) * s) as i128 - (wsum * s_k) as i128 };
    let finalize = |p: InFlight,
                    acc: &mut [FlowAcc],
                    depart: &mut [Option<u128>],
                    q_at: &[u64],
                    s_done: u128| {
        let a = arrivals[p.idx];
        let k = a.flow as usize;
        let f = &mut acc[k];
        let w = weights[k];
        depart[p.idx] = Some(p.end);
        f.sys_bytes -= u64::from(a.len);
        f.sys_pkts -= 1;
        let d = d_of(w, s_done, f.served);
        f.bwfi = f.bwfi.max(d - f.run_min);
        f.run_min = f.run_min.min(d);
        let e = (u128::from(w) * (p.end - a_ticks(p.idx))) as i128
            - (u128::from(q_at[p.idx]) * TICKS_PER_BYTE * wsum) as i128;
        f.twfi = Some(f.twfi.map_or(e, |m| m.max(e)));
        let lag = p.end as i128 - fluid[p.idx] as i128;
        f.lag = Some(f.lag.map_or(lag, |m| m.max(lag)));
        f.packets += 1;
    };

    loop {
        let t = if sched.queued() == 0 {
            if i == n {
                break;
            }
            t_free.max(a_ticks(i))
        } else {
            t_free
        };
        while i < n && a_ticks(i) <= t {
            let a = a_ticks(i);
            if in_flight.as_ref().is_some_and(|p| p.end <= a) {
                if let Some(p) = in_flight.take() {
                    finalize(p, &mut acc, &mut depart, &q_at, s_done);
                }
            }
            let arr = arrivals[i];
            let k = arr.flow as usize;
            if acc[k].sys_pkts == 0 {
                // A backlogged period starts: the B-WFI window may open here.
                let rem = in_flight.as_ref().map_or(0, |p| p.end - a);
                acc[k].run_min = d_of(weights[k], s_done - rem, acc[k].served);
            }
            acc[k].sys_pkts += 1;
            acc[k].sys_bytes += u64::from(arr.len);
            q_at[i] = acc[k].sys_bytes;
            let pkt = Packet::new(FlowId(arr.flow), arr.len, i as u64);
            if let Err(rej) = sched.enqueue(ns_of(a), pkt) {
                return Err(ConfigError::invalid(
                    format!("scheduler {name}"),
                    format!(
                        "refused packet {i} of flow {k} ({}); the measurement needs every packet",
                        rej.reason.as_str()
                    ),
                ));
            }
            i += 1;
        }
        if let Some(p) = in_flight.take() {
            finalize(p, &mut acc, &mut depart, &q_at, s_done);
        }
        match sched.dequeue(ns_of(t)) {
            Some(pkt) => {
                let idx = pkt.token as usize;
                let valid =
                    idx < n && depart[idx].is_none() && arrivals[idx].flow == pkt.flow.0 && idx < i;
                if !valid {
                    return Err(ConfigError::invalid(
                        format!("scheduler {name}"),
                        format!(
                            "handed back a packet it was not given (token {})",
                            pkt.token
                        ),
                    ));
                }
                let k = pkt.flow.index();
                let d = d_of(weights[k], s_done, acc[k].served);
                acc[k].bwfi = acc[k].bwfi.max(d - acc[k].run_min);
                acc[k].run_min = acc[k].run_min.min(d);
                let tx = u128::from(arrivals[idx].len) * TICKS_PER_BYTE;
                s_done += tx;
                acc[k].served += tx;
                t_free = t + tx;
                // Mark it as taken so a duplicate is caught above.
                depart[idx] = Some(t_free);
                in_flight = Some(InFlight { idx, end: t_free });
            }
            None => {
                if sched.queued() > 0 {
                    return Err(ConfigError::invalid(
                        format!("scheduler {name}"),
                        "returned no packet while holding some: only work-conserving schedulers can be measured",
                    ));
                }
            }
        }
    }
    if let Some(p) = in_flight.take() {
        finalize(p, &mut acc, &mut depart, &q_at, s_done);
    }

    let scale = wsum as f64 * TICKS_PER_BYTE as f64;
    let mut all_within = true;
    let per_flow = acc
        .iter()
        .enumerate()
        .map(|(k, f)| {
            let w = weights[k];
            let bound = twfi_bound(name, k, weights, &scenario.lmax);
            let within = bound.map(|bd| f.twfi.is_none_or(|e| bd.admits(e, u128::from(w))));
            if within == Some(false) {
                all_within = false;
            }
            FlowWfi {
                flow: k as u32,
                weight: w,
                phi: f64::from(w) / wsum as f64,
                packets: f.packets,
                max_twfi_ns: f.twfi.map(|e| signed_ns(e, u128::from(w), rate)),
                max_lag_ns: f.lag.map(|l| signed_ns(l, 1, rate)),
                max_bwfi_bytes: f.bwfi as f64 / scale,
                bound_twfi_ns: bound.map(|bd| bd.ns(rate)),
                within_bound: within,
            }
        })
        .collect();
    let trace = arrivals
        .iter()
        .enumerate()
        .map(|(i, a)| TraceRow {
            flow: a.flow,
            weight: weights[a.flow as usize],
            len: a.len,
            arrival_ns: a.time_ns,
            departure_ns: ticks_to_ns(depart[i].unwrap_or(0), rate),
            fluid_finish_ns: ticks_to_ns(fluid[i], rate),
        })
        .collect();
    Ok(WfiRun {
        report: WfiReport {
            schema_version: 1,
            alg: name.to_string(),
            workload: scenario.workload.to_string(),
            rate_bps: rate,
            flows: weights.len(),
            packets: n as u64,
            all_within_bound: all_within,
            per_flow,
        },
        trace,
    })
}

/// `num / den` ticks as ns, keeping the sign.
fn signed_ns(num: i128, den: u128, rate: u64) -> f64 {
    let mag = ticks_to_ns(num.unsigned_abs() / den, rate)
        + (num.unsigned_abs() % den) as f64 / den as f64 / rate as f64;
    if num < 0 {
        -mag
    } else {
        mag
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paper_weights_match_the_papers_numbers() {
        for n in [25u32, 100] {
            let w = paper_weights(n).unwrap();
            assert_eq!(w.len(), n as usize);
            assert_eq!(w.iter().sum::<u32>(), 200);
            assert_eq!(*w.iter().max().unwrap(), 100);
            assert_eq!(*w.iter().min().unwrap(), 1);
        }
        assert!(paper_weights(24).is_err());
    }

    #[test]
    fn bounds_of_the_paper_example() {
        let l = vec![1500; 25];
        let w = paper_weights(25).unwrap();
        let ns = |alg| twfi_bound(alg, 0, &w, &l).unwrap().ns(PAPER_RATE_BPS);
        assert_eq!(ns("qfq"), 14_400.0);
        // 8·L/(φ B) = 19.2 µs, two aggregates of eight weight-4 flows: one
        // turn of 12 000 B = 9.6 µs, and L/B = 1.2 µs.
        assert_eq!(ns("qfq+"), 19_200.0 + 9_600.0 + 1_200.0);
        assert_eq!(ns("drr"), 271_200.0);
        assert_eq!(ns("wf2q+"), 2_400.0 + 1_200.0);
        assert!(twfi_bound("prio", 0, &w, &l).is_none());
    }

    #[test]
    fn one_flow_on_an_idle_link_meets_every_bound_exactly() {
        // One flow, packets spaced wider than their transmission time: each
        // departs len/B after arrival; Q = len, φ = 1, so e = 0 and the
        // fluid system agrees.
        let scenario = Scenario {
            workload: "test",
            weights: vec![3],
            lmax: vec![1000],
            rate_bps: 8_000_000_000,
            arrivals: (0..5).map(|i| Arrival::new(i * 2000, 0, 1000)).collect(),
        };
        let run = run(AlgKind::Drr, &scenario).unwrap();
        let f = &run.report.per_flow[0];
        assert_eq!(f.max_twfi_ns, Some(0.0));
        assert_eq!(f.max_lag_ns, Some(0.0));
        assert_eq!(f.max_bwfi_bytes, 0.0);
        assert_eq!(run.trace[4].departure_ns, 9000.0);
    }

    #[test]
    fn bwfi_of_a_packet_waiting_behind_a_burst() {
        // 10 Gbit/s = 1.25 B/ns. Flow 1 dumps 10 packets at 0; flow 0 (same
        // weight) sends one at 1 ns. FIFO serves it last: from 1 ns to
        // 12 000 ns the link sends 15 000 − 1.25 bytes, none of them flow
        // 0's: B-WFI = φ·W = 0.5 × 14 998.75.
        let mut arrivals: Vec<_> = (0..10).map(|_| Arrival::new(0, 1, 1500)).collect();
        arrivals.push(Arrival::new(1, 0, 1500));
        let scenario = Scenario {
            workload: "test",
            weights: vec![1, 1],
            lmax: vec![1500, 1500],
            rate_bps: 10_000_000_000,
            arrivals,
        };
        let run = run(AlgKind::Fifo, &scenario).unwrap();
        let f = &run.report.per_flow[0];
        assert!((f.max_bwfi_bytes - 0.5 * 14_998.75).abs() < 1e-9, "{f:?}");
        // T-WFI: d = 13 200, a = 1, Q = 1500 B at φ = 0.5 → 2400 ns.
        assert_eq!(f.max_twfi_ns, Some(13_200.0 - 1.0 - 2_400.0));
        // Flow 1 is served ahead of its share: its B-WFI never goes positive
        // beyond what it lost while flow 0 was on the wire.
        assert!(run.report.per_flow[1].max_bwfi_bytes <= 750.0 + 1e-9);
    }
}
