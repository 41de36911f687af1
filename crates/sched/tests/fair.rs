//! Service guarantees of the fair queueing algorithms (WF²Q+, QFQ, QFQ+).
//!
//! Every test is seeded; the seed is printed in each assertion message.
//!
//! * The **lag bound** tests drive each scheduler with an ideal link of
//!   1 byte/ns (B = 8 Gbit/s; exact integer transmission times), one packet
//!   at a time, and for every packet compute the Bennett–Zhang excess
//!   (docs/REFERENCE.md §3.1, §3.5)
//!
//!   e = d − a − Q_k(a)/(φ_k·B),  φ_k = w_k / Σ w (all configured flows),
//!
//!   where Q_k(a) counts the bytes of flow k that have arrived by `a` (the
//!   packet itself included) and not finished transmission. Each test
//!   asserts max e ≤ the algorithm's T-WFI bound (see [`Bound`]).
//! * Workloads: random weights in 1..=65536 with both extremes frequent,
//!   lengths 64..=1500 or up to 65535, bursts, flows joining and leaving
//!   (on/off periods and whole-system idle gaps).
//! * Conservation and per-flow FIFO are checked on every run.
//! * Virtual time wraps: with 40 fraction bits, V wraps every few hundred
//!   to few thousand packets in these workloads; the runs also start V just
//!   below 2⁶⁴ and assert that wraps happened.
//! * Shares: permanently backlogged flows get their weighted share within
//!   1% over long runs.

use pspat_sched::{
    FlowId, FlowParams, FlowTable, Instant, Packet, Qfq, QfqPlus, Scheduler, Wf2qPlus,
};

/// The schedulers under test, with their virtual clock exposed.
trait Fair: Scheduler {
    fn build(flows: FlowTable, capacity: usize, v0: u64) -> Self;
    fn vt(&self) -> u64;
    /// The T-WFI bound (ns at 1 byte/ns) of a flow, scaled by its weight
    /// (so it stays an integer): `bound_ns · w_k`.
    fn bound_scaled(k: &FlowParams, wsum: u64, lmax_all: u64, turn_max: u64) -> u128;
    /// A tighter form, only reported (not asserted).
    fn tight_bound_scaled(k: &FlowParams, wsum: u64, lmax_all: u64, turn_max: u64) -> u128 {
        Self::bound_scaled(k, wsum, lmax_all, turn_max)
    }
}

impl Fair for Wf2qPlus {
    fn build(flows: FlowTable, capacity: usize, v0: u64) -> Self {
        Wf2qPlus::new(flows, capacity)
            .expect("valid config")
            .with_initial_vtime(v0)
    }
    fn vt(&self) -> u64 {
        self.vtime()
    }
    /// L_k/(φ_k B) + 2·L/B. See the module docs of `wf2q_plus`: one L/B
    /// is non-preemption, the other the whole-packet steps of V; L_k/(φ_k
    /// B) is the flow's own head start.
    fn bound_scaled(k: &FlowParams, wsum: u64, lmax_all: u64, _turn: u64) -> u128 {
        let w = u128::from(k.weight);
        u128::from(k.lmax) * u128::from(wsum) + 2 * u128::from(lmax_all) * w
    }
    fn tight_bound_scaled(k: &FlowParams, wsum: u64, lmax_all: u64, _turn: u64) -> u128 {
        let w = u128::from(k.weight);
        u128::from(k.lmax) * u128::from(wsum) + u128::from(lmax_all) * w
    }
}

/// WF²Q+ told the link rate (1 byte/ns = 8 Gbit/s, the harness's link):
/// V grows while a packet is on the wire.
struct HintedWf2q(Wf2qPlus);

/// The harness's link rate in bit/s (1 byte/ns).
const LINK_BPS: u64 = 8_000_000_000;

impl Scheduler for HintedWf2q {
    fn enqueue(&mut self, now: Instant, pkt: Packet) -> Result<(), pspat_sched::Rejected> {
        self.0.enqueue(now, pkt)
    }
    fn dequeue(&mut self, now: Instant) -> Option<Packet> {
        self.0.dequeue(now)
    }
    fn queued(&self) -> usize {
        self.0.queued()
    }
    fn name(&self) -> &'static str {
        self.0.name()
    }
}

impl Fair for HintedWf2q {
    fn build(flows: FlowTable, capacity: usize, v0: u64) -> Self {
        HintedWf2q(
            Wf2qPlus::new(flows, capacity)
                .expect("valid config")
                .with_initial_vtime(v0)
                .with_link_rate(LINK_BPS)
                .expect("valid rate"),
        )
    }
    fn vt(&self) -> u64 {
        self.0.vtime()
    }
    /// The one-maximum-packet form L_k/(φ_k B) + L/B
    /// (`pspat_eval::wfi::twfi_bound("wf2q+")`).
    fn bound_scaled(k: &FlowParams, wsum: u64, lmax_all: u64, _turn: u64) -> u128 {
        let w = u128::from(k.weight);
        u128::from(k.lmax) * u128::from(wsum) + u128::from(lmax_all) * w
    }
    /// L_k/(φ_k B) alone, reported only (to size the L/B term's use).
    fn tight_bound_scaled(k: &FlowParams, wsum: u64, _lmax_all: u64, _turn: u64) -> u128 {
        u128::from(k.lmax) * u128::from(wsum)
    }
}

impl Fair for Qfq {
    fn build(flows: FlowTable, capacity: usize, v0: u64) -> Self {
        Qfq::new(flows, capacity)
            .expect("valid config")
            .with_initial_vtime(v0)
    }
    fn vt(&self) -> u64 {
        self.vtime()
    }
    /// T-WFI_QFQ(k) = 6·L_k/(φ_k B) + (L − L_k)/B (docs/REFERENCE.md §3.3).
    fn bound_scaled(k: &FlowParams, wsum: u64, lmax_all: u64, _turn: u64) -> u128 {
        let w = u128::from(k.weight);
        6 * u128::from(k.lmax) * u128::from(wsum) + u128::from(lmax_all - u64::from(k.lmax)) * w
    }
}

impl Fair for QfqPlus {
    fn build(flows: FlowTable, capacity: usize, v0: u64) -> Self {
        QfqPlus::new(flows, capacity)
            .expect("valid config")
            .with_initial_vtime(v0)
    }
    fn vt(&self) -> u64 {
        self.vtime()
    }
    /// 8·L_k/(φ_k B) + (L_turn + L)/B: QFQ's 6·L_A/(φ_A B) for the
    /// aggregate (L_A/φ_A = L_k/φ_k); 2·L_k/(φ_k B) for DRR inside it (each
    /// sibling may send its carried deficit and one quantum more than k);
    /// one turn of another aggregate (its whole budget) for
    /// non-preemption; one L/B for the whole-packet steps of V (see the
    /// `qfq_plus` module docs).
    fn bound_scaled(k: &FlowParams, wsum: u64, lmax_all: u64, turn_max: u64) -> u128 {
        let w = u128::from(k.weight);
        8 * u128::from(k.lmax) * u128::from(wsum) + u128::from(turn_max + lmax_all) * w
    }
    /// 7·L_k/(φ_k B) + L_turn/B: the form with one DRR quantum and no V
    /// step term, reported only.
    fn tight_bound_scaled(k: &FlowParams, wsum: u64, _lmax_all: u64, turn_max: u64) -> u128 {
        let w = u128::from(k.weight);
        7 * u128::from(k.lmax) * u128::from(wsum) + u128::from(turn_max) * w
    }
}

#[derive(Clone, Copy, Debug)]
struct Arrival {
    t: u64,
    flow: u32,
    len: u32,
}

#[derive(Default)]
struct RunStats {
    /// Largest e/bound over all packets.
    worst_ratio: f64,
    /// Largest e/tight bound over all packets.
    worst_tight: f64,
    /// Largest (e − L_k/(φ_k B)) / (L/B): the smallest c for which
    /// e ≤ L_k/(φ_k B) + c·L/B held on every packet.
    worst_c: f64,
    /// Observed wraps of V.
    wraps: u64,
    packets: usize,
}

/// Runs `arrivals` (sorted by time) through a fresh scheduler on an ideal
/// 1 byte/ns link; checks conservation, per-flow FIFO and the lag bound.
fn run_link<S: Fair>(label: &str, flows: &[FlowParams], arrivals: &[Arrival], v0: u64) -> RunStats {
    let table = FlowTable::new(flows.to_vec()).expect("valid flows");
    let wsum = table.total_weight();
    let lmax_all = u64::from(table.max_lmax());
    let turn_max = qfq_plus_turn_max(flows);
    let mut s = S::build(table, arrivals.len().max(1), v0);
    let n = arrivals.len();
    let mut depart = vec![u64::MAX; n];
    let mut order = Vec::with_capacity(n);
    let mut now = 0u64;
    let mut i = 0;
    let mut stats = RunStats::default();
    loop {
        while i < n && arrivals[i].t <= now {
            let a = arrivals[i];
            s.enqueue(
                Instant::from_nanos(a.t),
                Packet::new(FlowId(a.flow), a.len, i as u64),
            )
            .unwrap_or_else(|r| panic!("{label}: packet {i} refused: {:?}", r.reason));
            i += 1;
        }
        if s.queued() > 0 {
            let before = s.vt();
            let p = s
                .dequeue(Instant::from_nanos(now))
                .unwrap_or_else(|| panic!("{label}: idle with {} packets held", s.queued()));
            let after = s.vt();
            if after < before && (after.wrapping_sub(before) as i64) > 0 {
                stats.wraps += 1;
            }
            let tok = p.token as usize;
            assert!(tok < n, "{label}: invented token {tok}");
            assert_eq!(depart[tok], u64::MAX, "{label}: token {tok} left twice");
            assert_eq!(
                (p.flow.0, p.len),
                (arrivals[tok].flow, arrivals[tok].len),
                "{label}: packet altered"
            );
            now += u64::from(p.len);
            depart[tok] = now;
            order.push(tok);
        } else if i < n {
            now = arrivals[i].t;
        } else {
            break;
        }
    }
    assert!(s.dequeue(Instant::from_nanos(now)).is_none());
    assert_eq!(order.len(), n, "{label}: packets lost");

    // Per-flow FIFO: departures of a flow in arrival order.
    let mut last = vec![None::<usize>; flows.len()];
    for &tok in &order {
        let l = &mut last[arrivals[tok].flow as usize];
        if let Some(t) = *l {
            assert!(t < tok, "{label}: flow {} reordered", arrivals[tok].flow);
        }
        *l = Some(tok);
    }

    // Lag: per flow, packets in arrival order; Q_k(a_j) = bytes of packets
    // i <= j of the flow with d_i > a_j.
    let mut per_flow: Vec<Vec<usize>> = vec![Vec::new(); flows.len()];
    for (j, a) in arrivals.iter().enumerate() {
        per_flow[a.flow as usize].push(j);
    }
    for (k, pkts) in per_flow.iter().enumerate() {
        let fp = &flows[k];
        let w = u128::from(fp.weight);
        let bound = S::bound_scaled(fp, wsum, lmax_all, turn_max);
        let tight = S::tight_bound_scaled(fp, wsum, lmax_all, turn_max);
        // Rounding of the fixed-point tags and of V: far below 1 ns per
        // packet; allow 1 ns plus 1 ppm of the bound.
        let slack = w + bound / 1_000_000;
        let mut prefix = vec![0u64; pkts.len() + 1];
        for (x, &j) in pkts.iter().enumerate() {
            prefix[x + 1] = prefix[x] + u64::from(arrivals[j].len);
        }
        let mut first_queued = 0; // first index whose departure is after a_j
        for (x, &j) in pkts.iter().enumerate() {
            let a = arrivals[j].t;
            while depart[pkts[first_queued]] <= a {
                first_queued += 1;
            }
            let q = prefix[x + 1] - prefix[first_queued];
            let d = depart[j];
            // e·w_k = (d − a)·w_k − Q·Σw
            let lhs = u128::from(d - a) * w;
            let rhs = u128::from(q) * u128::from(wsum);
            if lhs > rhs {
                let e = lhs - rhs;
                let ratio = e as f64 / bound as f64;
                stats.worst_ratio = stats.worst_ratio.max(ratio);
                stats.worst_tight = stats.worst_tight.max(e as f64 / tight as f64);
                let own = u128::from(fp.lmax) * u128::from(wsum);
                let c = (e as f64 - own as f64) / (lmax_all as f64 * w as f64);
                stats.worst_c = stats.worst_c.max(c);
                assert!(
                    e <= bound + slack,
                    "{label}: flow {k} (w {}, lmax {}) packet {j}: a {a} d {d} Q {q}: \
                     excess {:.0} ns > bound {:.0} ns",
                    fp.weight,
                    fp.lmax,
                    e as f64 / w as f64,
                    bound as f64 / w as f64
                );
            }
        }
    }
    stats.packets = n;
    stats
}

/// The largest QFQ+ aggregate budget: flows of equal (weight, lmax) in
/// groups of up to 8.
fn qfq_plus_turn_max(flows: &[FlowParams]) -> u64 {
    let mut keys: Vec<(u32, u32)> = flows.iter().map(|f| (f.weight, f.lmax)).collect();
    keys.sort_unstable();
    let mut best = 0u64;
    let mut i = 0;
    while i < keys.len() {
        let mut j = i;
        while j < keys.len() && keys[j] == keys[i] {
            j += 1;
        }
        let n = (j - i).min(8) as u64;
        best = best.max(n * u64::from(keys[i].1));
        i = j;
    }
    best
}

#[derive(Clone, Copy, Debug)]
enum Lengths {
    /// lmax 1500, lengths 64..=1500.
    Ethernet,
    /// lmax random up to 65535 (some flows at 65535), lengths 64..=lmax.
    Jumbo,
}

fn random_weight(rng: &mut fastrand::Rng) -> u32 {
    match rng.u8(0..10) {
        0 | 1 => 1,
        2 | 3 => 65_536,
        4 => rng.u32(1..=16),
        // log-uniform over 1..=65536
        _ => {
            let bits = rng.u32(0..=16);
            rng.u32(1..=(1u32 << bits)).max(1)
        }
    }
}

fn random_flows(rng: &mut fastrand::Rng, n: usize, lengths: Lengths) -> Vec<FlowParams> {
    (0..n)
        .map(|_| FlowParams {
            weight: random_weight(rng),
            lmax: match lengths {
                Lengths::Ethernet => 1500,
                Lengths::Jumbo => match rng.u8(0..4) {
                    0 => 65_535,
                    1 => 1500,
                    2 => 9000,
                    _ => rng.u32(64..=65_535),
                },
            },
            priority: 0,
        })
        .collect()
}

/// Bursty on/off arrivals at about the link rate, with whole-system idle
/// gaps; flows join and leave.
fn random_arrivals(rng: &mut fastrand::Rng, flows: &[FlowParams], packets: usize) -> Vec<Arrival> {
    let n = flows.len();
    let mut on: Vec<bool> = (0..n).map(|_| rng.bool()).collect();
    let mut t = 0u64;
    let mut out = Vec::with_capacity(packets);
    let load = 0.7 + rng.f64() * 0.8; // offered load 0.7..1.5 of the link
    while out.len() < packets {
        // Flows join and leave.
        if rng.u8(0..8) == 0 {
            let f = rng.usize(0..n);
            on[f] = !on[f];
        }
        if rng.u16(0..500) == 0 {
            // Everybody pauses long enough for the link to drain.
            t += 50_000_000;
        }
        let active: Vec<usize> = (0..n).filter(|&f| on[f]).collect();
        let f = if active.is_empty() {
            rng.usize(0..n)
        } else {
            active[rng.usize(0..active.len())]
        };
        let burst = if rng.u8(0..4) == 0 {
            rng.usize(1..32)
        } else {
            1
        };
        let mut bytes = 0u64;
        for _ in 0..burst {
            if out.len() >= packets {
                break;
            }
            let lmax = flows[f].lmax;
            let len = if rng.u8(0..4) == 0 {
                lmax
            } else {
                rng.u32(64.min(lmax)..=lmax)
            };
            out.push(Arrival {
                t,
                flow: f as u32,
                len,
            });
            bytes += u64::from(len);
        }
        t += ((bytes as f64 / load) * (0.2 + 1.6 * rng.f64())) as u64;
    }
    out
}

const SEEDS: [u64; 6] = [1, 2, 3, 42, 0xDEAD_BEEF, 0x5EED_F00D];

fn lag_property<S: Fair>(alg: &str, lengths: Lengths, v0: u64) {
    let mut worst = 0.0f64;
    let mut tight = 0.0f64;
    let mut c = 0.0f64;
    let mut wraps = 0;
    for seed in SEEDS {
        let mut rng = fastrand::Rng::with_seed(seed);
        let n = rng.usize(2..40);
        let flows = random_flows(&mut rng, n, lengths);
        let packets = match lengths {
            Lengths::Ethernet => 20_000,
            Lengths::Jumbo => 8_000,
        };
        let arrivals = random_arrivals(&mut rng, &flows, packets);
        let label = format!("{alg} {lengths:?} seed {seed:#x} v0 {v0:#x}");
        let st = run_link::<S>(&label, &flows, &arrivals, v0);
        worst = worst.max(st.worst_ratio);
        tight = tight.max(st.worst_tight);
        c = c.max(st.worst_c);
        wraps += st.wraps;
    }
    println!(
        "{alg} {lengths:?}: worst e/bound {worst:.3} (e/tight form {tight:.3}), \
         e ≤ L_k/(φ_k B) + {c:.3}·L/B, {wraps} wraps of V"
    );
    if v0 == NEAR_WRAP {
        assert!(wraps > 0, "{alg}: the runs never wrapped V");
    }
}

/// Near the wrap: the first packets already carry V past 2⁶⁴.
const NEAR_WRAP: u64 = u64::MAX - (1 << 36);

#[test]
fn wf2q_plus_lag_within_its_twfi() {
    lag_property::<Wf2qPlus>("wf2q+", Lengths::Ethernet, 0);
    lag_property::<Wf2qPlus>("wf2q+", Lengths::Jumbo, NEAR_WRAP);
}

/// With the link rate hint, WF²Q+ meets its exact one-packet bound
/// L_k/(φ_k B) + L/B, on the same workloads (64 KB packets and V-wrap
/// runs included).
#[test]
fn wf2q_plus_exact_one_packet_bound_with_link_rate() {
    lag_property::<HintedWf2q>("wf2q+ hinted", Lengths::Ethernet, 0);
    lag_property::<HintedWf2q>("wf2q+ hinted", Lengths::Jumbo, NEAR_WRAP);
}

#[test]
fn qfq_lag_within_its_twfi() {
    lag_property::<Qfq>("qfq", Lengths::Ethernet, 0);
    lag_property::<Qfq>("qfq", Lengths::Jumbo, NEAR_WRAP);
}

#[test]
fn qfq_plus_lag_within_its_twfi() {
    lag_property::<QfqPlus>("qfq+", Lengths::Ethernet, 0);
    lag_property::<QfqPlus>("qfq+", Lengths::Jumbo, NEAR_WRAP);
}

/// The lower-bound case (docs/REFERENCE.md §3.1): a heavy flow's packet arrives
/// just after a light flow's maximum packet started; its excess is about
/// one maximum packet, and the bound still holds.
fn lower_bound_case<S: Fair>(alg: &str) {
    let flows = [FlowParams::weighted(1), FlowParams::weighted(65_536)];
    let arrivals = [
        Arrival {
            t: 0,
            flow: 0,
            len: 1500,
        },
        Arrival {
            t: 1,
            flow: 1,
            len: 64,
        },
    ];
    let st = run_link::<S>(alg, &flows, &arrivals, 0);
    assert!(st.worst_ratio > 0.0, "{alg}: the lower bound was not hit");
}

#[test]
fn lower_bound_case_is_within_every_bound() {
    lower_bound_case::<Wf2qPlus>("wf2q+");
    lower_bound_case::<Qfq>("qfq");
    lower_bound_case::<QfqPlus>("qfq+");
}

/// Many flows: one heavy victim against 500 light flows with full queues
/// (DRR's worst case); the victim's excess stays within the bound.
fn many_flows_victim<S: Fair>(alg: &str) {
    let mut flows = vec![FlowParams::weighted(1); 500];
    flows.push(FlowParams::weighted(500));
    let mut arrivals = Vec::new();
    for round in 0..4 {
        for f in 0..500 {
            arrivals.push(Arrival {
                t: 0,
                flow: f,
                len: if round == 0 { 1500 } else { 64 + f % 1400 },
            });
        }
    }
    for i in 0..200u64 {
        arrivals.push(Arrival {
            t: 1 + i * 3000,
            flow: 500,
            len: 1500,
        });
    }
    arrivals.sort_by_key(|a| a.t);
    let st = run_link::<S>(alg, &flows, &arrivals, 0);
    println!("{alg} victim: worst e/bound {:.3}", st.worst_ratio);
}

#[test]
fn heavy_victim_among_many_light_flows() {
    many_flows_victim::<Wf2qPlus>("wf2q+");
    many_flows_victim::<Qfq>("qfq");
    many_flows_victim::<QfqPlus>("qfq+");
}

/// Permanently backlogged flows: over a long run each flow's share of the
/// bytes is within 1% of w_k / Σ w, and at every instant its byte lag is
/// within `lag_bytes(k)`.
fn shares_within_one_percent<S: Fair>(alg: &str, heavy_weights: bool) {
    for seed in SEEDS {
        let mut rng = fastrand::Rng::with_seed(seed);
        let n = rng.usize(2..24);
        let flows: Vec<FlowParams> = (0..n)
            .map(|_| FlowParams {
                // Every flow must get enough packets for 1% to be
                // meaningful: weight ratios up to 64 here.
                weight: if heavy_weights {
                    rng.u32(1024..=65_536)
                } else {
                    rng.u32(1..=64)
                },
                lmax: 1500,
                priority: 0,
            })
            .collect();
        let wsum: u64 = flows.iter().map(|f| u64::from(f.weight)).sum();
        let table = FlowTable::new(flows.clone()).expect("valid");
        let mut s = S::build(table, 16 * n, u64::MAX - (1 << 44));
        let mut token = 0u64;
        for f in 0..n {
            for _ in 0..8 {
                let len = rng.u32(64..=1500);
                s.enqueue(Instant::ZERO, Packet::new(FlowId(f as u32), len, token))
                    .expect("room");
                token += 1;
            }
        }
        let mut served = vec![0u64; n];
        let mut total = 0u64;
        let mut wraps = 0;
        for _ in 0..400_000 {
            let before = s.vt();
            let p = s.dequeue(Instant::ZERO).expect("backlogged");
            if s.vt() < before {
                wraps += 1;
            }
            served[p.flow.index()] += u64::from(p.len);
            total += u64::from(p.len);
            let len = rng.u32(64..=1500);
            s.enqueue(Instant::ZERO, Packet::new(p.flow, len, token))
                .expect("room");
            token += 1;
        }
        assert!(wraps > 0, "{alg} seed {seed}: V never wrapped");
        for (f, flow) in flows.iter().enumerate() {
            let ideal = total as f64 * f64::from(flow.weight) / wsum as f64;
            let err = (served[f] as f64 - ideal).abs() / ideal;
            assert!(
                err <= 0.01,
                "{alg} seed {seed}: flow {f} (w {}) got {} B, ideal {ideal:.0} B ({:.2}% off)",
                flow.weight,
                served[f],
                err * 100.0
            );
        }
    }
}

#[test]
fn wf2q_plus_shares_within_one_percent() {
    shares_within_one_percent::<Wf2qPlus>("wf2q+", false);
    shares_within_one_percent::<Wf2qPlus>("wf2q+", true);
}

#[test]
fn qfq_shares_within_one_percent() {
    shares_within_one_percent::<Qfq>("qfq", false);
    shares_within_one_percent::<Qfq>("qfq", true);
}

#[test]
fn qfq_plus_shares_within_one_percent() {
    shares_within_one_percent::<QfqPlus>("qfq+", false);
    shares_within_one_percent::<QfqPlus>("qfq+", true);
}

/// Extreme weights (1 and 65536 together) and maximum lengths configure
/// and run; a packet above the flow's lmax is refused by QFQ and QFQ+.
#[test]
fn extreme_parameters_configure_and_oversize_is_refused() {
    let flows = vec![
        FlowParams {
            weight: 1,
            lmax: 65_535,
            priority: 0,
        },
        FlowParams {
            weight: 65_536,
            lmax: 1,
            priority: 0,
        },
        FlowParams {
            weight: 65_536,
            lmax: 65_535,
            priority: 0,
        },
        FlowParams {
            weight: 1,
            lmax: 64,
            priority: 0,
        },
    ];
    let t = FlowTable::new(flows).unwrap();
    let q = Qfq::new(t.clone(), 16).unwrap();
    assert_eq!(q.group(FlowId(0)), Some(pspat_sched::qfq::MAX_INDEX));
    assert_eq!(q.group(FlowId(1)), Some(0));
    let mut q = q;
    let r = q
        .enqueue(Instant::ZERO, Packet::new(FlowId(3), 65, 0))
        .unwrap_err();
    assert_eq!(r.reason, pspat_sched::DropReason::BadLength);
    let mut qp = QfqPlus::new(t.clone(), 16).unwrap();
    let r = qp
        .enqueue(Instant::ZERO, Packet::new(FlowId(1), 2, 0))
        .unwrap_err();
    assert_eq!(r.reason, pspat_sched::DropReason::BadLength);
    let mut w = Wf2qPlus::new(t, 16).unwrap();
    for (i, (f, len)) in [(0u32, 65_535u32), (1, 1), (2, 65_535), (3, 64)]
        .into_iter()
        .enumerate()
    {
        q.enqueue(Instant::ZERO, Packet::new(FlowId(f), len, i as u64))
            .unwrap();
        qp.enqueue(Instant::ZERO, Packet::new(FlowId(f), len, i as u64))
            .unwrap();
        w.enqueue(Instant::ZERO, Packet::new(FlowId(f), len, i as u64))
            .unwrap();
    }
    for s in [
        &mut q as &mut dyn Scheduler,
        &mut qp as &mut dyn Scheduler,
        &mut w as &mut dyn Scheduler,
    ] {
        let mut n = 0;
        while s.dequeue(Instant::ZERO).is_some() {
            n += 1;
        }
        assert_eq!(n, 4, "{}", s.name());
    }
}

/// QFQ+ groups flows of equal (weight, lmax) into aggregates of at most 8.
#[test]
fn qfq_plus_aggregates_equal_flows() {
    let mut flows = vec![FlowParams::weighted(3); 10];
    flows.push(FlowParams::weighted(4));
    let s = QfqPlus::new(FlowTable::new(flows).unwrap(), 16).unwrap();
    assert_eq!(s.aggregates(), 3);
    assert_eq!(s.aggregate_of(FlowId(0)), Some((0, 8 * 1500)));
    assert_eq!(s.aggregate_of(FlowId(9)), Some((1, 2 * 1500)));
    assert_eq!(s.aggregate_of(FlowId(10)).map(|a| a.1), Some(1500));
}

/// Stress: many more seeds and longer runs of the lag property.
#[test]
#[ignore = "stress"]
fn stress_lag_bounds_many_seeds() {
    let mut worst = [0.0f64; 4];
    let mut tight = [0.0f64; 4];
    let mut cs = [0.0f64; 4];
    for seed in 0..200u64 {
        for lengths in [Lengths::Ethernet, Lengths::Jumbo] {
            let mut rng = fastrand::Rng::with_seed(seed);
            let n = rng.usize(2..200);
            let flows = random_flows(&mut rng, n, lengths);
            let arrivals = random_arrivals(&mut rng, &flows, 50_000);
            let v0 = rng.u64(..);
            let l = format!("{lengths:?} seed {seed} v0 {v0:#x}");
            for (i, st) in [
                run_link::<Wf2qPlus>(&format!("wf2q+ {l}"), &flows, &arrivals, v0),
                run_link::<Qfq>(&format!("qfq {l}"), &flows, &arrivals, v0),
                run_link::<QfqPlus>(&format!("qfq+ {l}"), &flows, &arrivals, v0),
                run_link::<HintedWf2q>(&format!("wf2q+ hinted {l}"), &flows, &arrivals, v0),
            ]
            .into_iter()
            .enumerate()
            {
                worst[i] = worst[i].max(st.worst_ratio);
                tight[i] = tight[i].max(st.worst_tight);
                cs[i] = cs[i].max(st.worst_c);
            }
        }
    }
    println!(
        "worst e/bound (wf2q+, qfq, qfq+, wf2q+ hinted): {worst:.3?}; e/tight form: {tight:.3?}; \
         smallest c in L_k/(φ_k B) + c·L/B: {cs:.3?}"
    );
}

/// The three are selectable by name and alias, and build through
/// `SchedulerConfig` with the name they report.
#[test]
fn selectable_by_name_and_alias() {
    use pspat_sched::{AlgKind, SchedulerConfig};
    for (name, kind) in [
        ("wf2q+", AlgKind::Wf2qPlus),
        ("WF2QP", AlgKind::Wf2qPlus),
        ("wf2q", AlgKind::Wf2qPlus),
        ("qfq", AlgKind::Qfq),
        ("qfq+", AlgKind::QfqPlus),
        ("qfqp", AlgKind::QfqPlus),
    ] {
        assert_eq!(AlgKind::parse(name).unwrap(), kind, "{name}");
        let s = SchedulerConfig::new(kind)
            .build(FlowTable::uniform(3).unwrap())
            .unwrap();
        assert_eq!(s.name(), kind.name());
        assert!(AlgKind::ALL.contains(&kind));
    }
    assert!(AlgKind::known_names().contains("wf2q+, qfq, qfq+"));
}

/// 32k equal flows of 60-byte packets (the lead's benchmark shape) with
/// lmax 64, all backlogged: every flow's service stays within its bound,
/// in packets (WF²Q+ L_k + 2L, QFQ 6·L_k + L, QFQ+ 8·L_k + L_turn + L, with
/// L = L_k = 64 B and L_turn = 8·64 B). The bounds are in units of lmax:
/// with lmax 1500, QFQ may legitimately serve one flow ~30 small packets in
/// a row (they share one slot of its group).
fn many_flows<S: Fair>(alg: &str, tolerance: i64) {
    const N: usize = 32_768;
    let flow = FlowParams {
        weight: 1,
        lmax: 64,
        priority: 0,
    };
    let flows = FlowTable::new(vec![flow; N]).unwrap();
    let mut s = S::build(flows, 4 * N, 0);
    let mut token = 0u64;
    for _ in 0..2 {
        for f in 0..N {
            s.enqueue(Instant::ZERO, Packet::new(FlowId(f as u32), 60, token))
                .unwrap();
            token += 1;
        }
    }
    let mut served = vec![0i64; N];
    let rounds = 5;
    for _ in 0..rounds * N {
        let p = s.dequeue(Instant::ZERO).expect("backlogged");
        served[p.flow.index()] += 1;
        s.enqueue(Instant::ZERO, Packet::new(p.flow, 60, token))
            .unwrap();
        token += 1;
    }
    for (f, &got) in served.iter().enumerate() {
        assert!(
            (got - rounds as i64).abs() <= tolerance,
            "{alg}: flow {f} served {got} packets, ideal {rounds}"
        );
    }
}

#[test]
fn thirty_two_thousand_flows_share_evenly() {
    many_flows::<Wf2qPlus>("wf2q+", 3 * 64 / 60 + 1);
    many_flows::<Qfq>("qfq", 7 * 64 / 60 + 1);
    many_flows::<QfqPlus>("qfq+", 17 * 64 / 60 + 1);
}

#[test]
fn scheduler_config_passes_the_wf2q_plus_link_rate_hint() {
    use pspat_sched::{AlgKind, AnyScheduler, SchedulerConfig};
    let flows = FlowTable::uniform(3).unwrap();
    let mut cfg = SchedulerConfig::new(AlgKind::Wf2qPlus);
    let hint = |cfg: &SchedulerConfig| match cfg.build(flows.clone()) {
        Ok(AnyScheduler::Wf2qPlus(s)) => Ok(s.link_rate()),
        Ok(_) => panic!("built something else than WF2Q+"),
        Err(e) => Err(e.to_string()),
    };
    assert_eq!(hint(&cfg), Ok(None));
    cfg.link_rate_bps = Some(10_000_000_000);
    assert_eq!(hint(&cfg), Ok(Some(10_000_000_000)));
    // Survives a round trip through a config file.
    let back: SchedulerConfig =
        serde_json::from_str(&serde_json::to_string(&cfg).unwrap()).unwrap();
    assert_eq!(back, cfg);
    // Out of the hint's range: a named error, not a silent default.
    cfg.link_rate_bps = Some(1);
    let e = hint(&cfg).unwrap_err();
    assert!(e.contains("WF2Q+ link rate hint"), "{e}");
}
