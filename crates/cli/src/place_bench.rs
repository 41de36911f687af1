//! `pspat place-bench`: the HRW family of `pspat_sched::place` measured alone
//! (no threads): decision cost against the number of targets, balance and
//! disruption on generated flow populations; then the dispatcher placements
//! of the runtime (`pspat::DispatchPlacement`) through the threaded runtime:
//! load per dispatcher and reorders under a Zipf-skewed population.
//!
//! # Method
//! * **Decision cost.** For each variant and each `--targets` N: build the
//!   placement, set a fixed random queue snapshot (so the adaptive variants
//!   take their full path), then time `--decisions` decisions over a table of
//!   `--flows` random digests, taken in turn, with `std::time::Instant`; ns
//!   per decision is the median of `--repeat` runs. `modulo`'s row is the
//!   harness's floor (a load, a remainder, a dispatch). AHRW has a second
//!   row, `ahrw-queue-changed`: one queue changed before every decision, as
//!   when a dispatcher's backlog moves between two decisions, so every
//!   decision also recomputes the N multipliers.
//! * **Balance.** `--packets` packets drawn from the flow population, uniform
//!   (every flow equally likely) or Zipf(`--zipf`) over the flows. Each packet
//!   adds 1500 bytes to its target's queue; every target drains
//!   1500/(0.9·N) bytes per packet (90% load), so the adaptive variants see
//!   queues. `max_share_deviation` = max over targets of |packet share −
//!   expected share| (1/N, or w/Σw for the weighted variants).
//! * **Disruption.** With empty queues, the fraction of the `--flows` flows
//!   whose target changes when one target is added (N → N+1), next to the
//!   optimum (the new target's share: 1/(N+1), or its weight's share); modulo
//!   hashing moves about N/(N+1). The tree variants rebuild their tree for
//!   N+1 (a new group when the last one is full, a new package split for the
//!   synthetic topology), so they move more than the optimum whenever the
//!   tree's upper levels change.
//!
//! * **Arbiters.** A [`pspat::node::Node`] with one link (one arbiter) and
//!   one with two links (two arbiters), in alternation, `--arbiter-runs` of
//!   each: unlimited-rate links, the arbiter transmitting into a backend
//!   that only counts (dispatchers 0), `--arbiter-alg` (DRR by default)
//!   over `--flows` flows, arbiter `e`
//!   pinned to CPU `e mod n`; the same `--arbiter-clients` client threads
//!   (unpinned, or all on `--arbiter-client-cpu`), each a [`pspat::node::NodeClient`] submitting 60-byte packets
//!   round robin over the flows as fast as the mailboxes take them (flows
//!   sharded over the links by weighted HRW). After 100 ms of warm-up the
//!   packets released in the next `--arbiter-ms` are counted: one scheduler
//!   decision each. Reported: the median decisions/s of each configuration,
//!   the two-arbiter median over the one-arbiter median, and the CPU every
//!   thread last ran on.
//!
//! # Variants
//! `modulo` (digest mod N, a baseline), `hrw`, `whrw-log` and `whrw-carp`
//! (weighted, `--weights` repeated over the targets), `ahrw`, `h-ahrw` (a tree
//! of fan-out at most 4 per level), `ca-ahrw` and `h-cahrw` (a synthetic
//! topology per N: two packages when N ≥ 4, L2 shared by pairs; or the
//! `--topology` given, at its CPU count), `ps-hrw` (decision cost only: four
//! tenants of demand 1:2:3:4).
//!
//! Sources: D. Guo, *Multicore Scheduling for Network Applications Based on
//! Highest Random Weight*, PhD thesis, UC Riverside, 2010, §5.1–7.2.

use std::hint::black_box;
use std::io::Write;
use std::process::ExitCode;
use std::time::Instant;

use pspat_sched::place::{
    Aggregate, Ahrw, CaAhrw, CostMatrix, CostRatios, CpuPlace, FlowDigest, HierAhrw, HierCaAhrw,
    HierTree, Hrw, MinQueue, PlaceError, PsHrw, TenantId, Topology, WeightForm, WeightedHrw,
    DEFAULT_BETA,
};
use serde::Serialize;

use crate::topology::{load_cost_matrix, load_topology};
use crate::usage;

const AFTER_HELP: &str = "\
JSON (--json): one object {schema_version: 1, config, decision: [{variant, targets,
ns_per_decision}], balance: [{variant, targets, population, max_share_deviation}],
disruption: [{variant, targets, moved_fraction_adding_one, optimal_moved_fraction}],
runtime: [{variant, dispatchers, packets, max_over_mean_load, reorders}],
arbiters: [{arbiters, links, clients, decisions_per_s, ratio_to_one, runs_decisions_per_s,
arbiter_cpu_ns_per_decision, client_cpu_ns_per_packet, arbiter_parks, threads: [{role, cpu, pinned}]}]}.

The arbiters part (--arbiter-runs N, 0 skips it) runs a pspat::node::Node of 1 link / 1 arbiter and of
2 links / 2 arbiters in alternation, N runs each: unlimited links scheduled by --arbiter-alg over
--flows flows, the arbiter transmitting into a counting backend, arbiter e pinned to CPU e mod (CPUs), --arbiter-clients client threads (unpinned, or
all on --arbiter-client-cpu) submitting as fast as they can. decisions_per_s counts the packets the arbiters released in the
--arbiter-ms window after 100 ms of warm-up (median of the runs); ratio_to_one is that median over the
one-arbiter median.

The runtime part (--runtime-dispatchers N, 0 skips it) sends --runtime-packets packets of the
Zipf(--zipf) population over --flows flows through the threaded runtime (one client, FIFO,
N dispatchers whose backend works --runtime-tx-ns per packet, so backlogs form) once per
dispatcher placement: modulo, hrw, ahrw (flowlet guard) and round-robin. max_over_mean_load is
the busiest dispatcher's packets over the mean; reorders counts packets that left behind a later
packet of their flow (round robin reorders; the others must not).

--topology FILE is JSON: {\"cpus\": [{\"cpu\": 0, \"package\": 0, \"l2\": 0, \"llc\": 0}, ...],
\"ratios\": {\"shared_l2\": 2, \"shared_llc\": 4, \"same_package\": 4, \"other_package\": 12}}
(l2, llc, ratios optional), or the same fields in TOML when the name ends in .toml
([[cpus]] tables, a [ratios] table); --topology sysfs reads this machine. --cost-matrix FILE is a JSON
array of rows [target][source], square over the topology's CPUs, entries >= 1.

Exit codes: 0 success; 2 usage or configuration error.";

/// Flags of `pspat place-bench`.
#[derive(clap::Args)]
#[command(after_help = AFTER_HELP)]
pub struct Args {
    /// Numbers of targets to measure, comma separated, each 1..=1024.
    #[arg(long, default_value = "2,4,8,16,32,64")]
    pub targets: String,
    /// Weights of the weighted variants (e.g. link rates), comma separated,
    /// repeated over the targets; each finite and > 0.
    #[arg(long, default_value = "1,2,3,4")]
    pub weights: String,
    /// Flows in the generated population, 1..=10000000.
    #[arg(long, default_value_t = 10_000)]
    pub flows: usize,
    /// Packets drawn for the balance runs, 1..=100000000.
    #[arg(long, default_value_t = 200_000)]
    pub packets: usize,
    /// Zipf exponent of the skewed population, finite and >= 0.
    #[arg(long, default_value_t = 1.0, allow_hyphen_values = true)]
    pub zipf: f64,
    /// Decisions per timed run, 1..=1000000000.
    #[arg(long, default_value_t = 200_000)]
    pub decisions: u64,
    /// Timed runs; the median is reported, 1..=1000.
    #[arg(long, default_value_t = 5)]
    pub repeat: u32,
    /// Seed of the flow population and queue snapshots.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// CPU topology for ca-ahrw and h-cahrw: a JSON or TOML file, or `sysfs`.
    #[arg(long)]
    pub topology: Option<String>,
    /// Cost matrix replacing the topology's (needs --topology).
    #[arg(long)]
    pub cost_matrix: Option<String>,
    /// Dispatchers of the runtime part, 0..=64 (0 skips it).
    #[arg(long, default_value_t = 4)]
    pub runtime_dispatchers: usize,
    /// Packets per placement in the runtime part, 1..=100000000.
    #[arg(long, default_value_t = 300_000)]
    pub runtime_packets: u64,
    /// Work of the runtime part's backend per packet, ns, 0..=100000.
    #[arg(long, default_value_t = 300)]
    pub runtime_tx_ns: u64,
    /// Runs of each arbiter configuration (1 and 2 arbiters, alternating), 0..=1000 (0 skips it).
    #[arg(long, default_value_t = 5)]
    pub arbiter_runs: u32,
    /// Client threads of the arbiters part, 1..=64.
    #[arg(long, default_value_t = 2)]
    pub arbiter_clients: usize,
    /// Measured window of one arbiters run, ms, 1..=60000.
    #[arg(long, default_value_t = 300)]
    pub arbiter_ms: u64,
    /// Scheduling algorithm of the arbiters part's links (as `pspat demo --alg`).
    #[arg(long, default_value = "drr")]
    pub arbiter_alg: String,
    /// Pin every client thread of the arbiters part to this CPU (default: unpinned).
    #[arg(long)]
    pub arbiter_client_cpu: Option<usize>,
    /// How long an idle arbiter of the arbiters part spins before it parks, µs, 0..=100000
    /// (`RuntimeConfig::spin_ns`; 0 parks at once, which suits threads sharing a core).
    #[arg(long, default_value_t = 30)]
    pub arbiter_spin_us: u64,
    /// Idle arbiters of the arbiters part yield their core while they spin
    /// (`RuntimeConfig::spin_yields`), for clients sharing their cores.
    #[arg(long)]
    pub arbiter_spin_yields: bool,
    /// Print JSON instead of tables.
    #[arg(long)]
    pub json: bool,
}

impl Default for Args {
    fn default() -> Self {
        Args {
            targets: "2,4,8,16,32,64".into(),
            weights: "1,2,3,4".into(),
            flows: 10_000,
            packets: 200_000,
            zipf: 1.0,
            decisions: 200_000,
            repeat: 5,
            seed: 1,
            topology: None,
            cost_matrix: None,
            runtime_dispatchers: 4,
            runtime_packets: 300_000,
            runtime_tx_ns: 300,
            arbiter_runs: 5,
            arbiter_clients: 2,
            arbiter_ms: 300,
            arbiter_alg: "drr".into(),
            arbiter_client_cpu: None,
            arbiter_spin_us: 30,
            arbiter_spin_yields: false,
            json: false,
        }
    }
}

#[derive(Serialize)]
struct Decision {
    variant: &'static str,
    targets: usize,
    ns_per_decision: f64,
}

#[derive(Serialize)]
struct Balance {
    variant: &'static str,
    targets: usize,
    population: &'static str,
    max_share_deviation: f64,
}

#[derive(Serialize)]
struct Disruption {
    variant: &'static str,
    targets: usize,
    moved_fraction_adding_one: f64,
    /// The least any placement can move: the new target's share.
    optimal_moved_fraction: f64,
}

#[derive(Serialize)]
struct Config {
    targets: Vec<usize>,
    weights: Vec<f64>,
    flows: usize,
    packets: usize,
    zipf: f64,
    decisions: u64,
    repeat: u32,
    seed: u64,
    topology: Option<String>,
    arbiter_runs: u32,
    arbiter_clients: usize,
    arbiter_ms: u64,
    arbiter_alg: String,
    arbiter_client_cpu: Option<usize>,
    arbiter_spin_us: u64,
    arbiter_spin_yields: bool,
}

#[derive(Serialize)]
struct Report {
    schema_version: u32,
    config: Config,
    decision: Vec<Decision>,
    balance: Vec<Balance>,
    disruption: Vec<Disruption>,
    /// Placement inside the threaded runtime (see `--help`).
    runtime: Vec<RuntimeRow>,
    /// One arbiter against two (see `--help`).
    arbiters: Vec<ArbiterRow>,
}

#[derive(Serialize, Clone, Debug)]
struct ThreadCpu {
    role: String,
    cpu: Option<usize>,
    pinned: bool,
}

#[derive(Serialize, Debug)]
struct ArbiterRow {
    arbiters: usize,
    links: usize,
    clients: usize,
    decisions_per_s: f64,
    ratio_to_one: f64,
    runs_decisions_per_s: Vec<f64>,
    /// CPU time of the arbiter threads per released packet, ns (median of
    /// the runs; from /proc/self/task/*/schedstat over the window).
    arbiter_cpu_ns_per_decision: f64,
    /// CPU time of the client threads per released packet, ns (the same).
    client_cpu_ns_per_packet: f64,
    /// Times the arbiters parked for lack of work in the last run (a
    /// starved arbiter parks; a saturated one does not).
    arbiter_parks: u64,
    /// Where every thread of the last run ran.
    threads: Vec<ThreadCpu>,
}

#[derive(Serialize)]
struct RuntimeRow {
    variant: &'static str,
    dispatchers: usize,
    packets: u64,
    max_over_mean_load: f64,
    reorders: u64,
}

const VARIANTS: [&str; 9] = [
    "modulo",
    "hrw",
    "whrw-log",
    "whrw-carp",
    "ahrw",
    "h-ahrw",
    "ca-ahrw",
    "h-cahrw",
    "ps-hrw",
];

/// One placement under test.
enum Placer {
    Modulo(u64),
    Hrw(Hrw),
    Weighted(WeightedHrw),
    Ahrw(Ahrw),
    HierAhrw(HierAhrw),
    CaAhrw(CaAhrw),
    HierCaAhrw(HierCaAhrw),
    PsHrw(PsHrw, [TenantId; 4]),
}

impl Placer {
    fn decide(&mut self, d: FlowDigest, i: usize) -> usize {
        match self {
            Placer::Modulo(n) => (d.0 % *n) as usize,
            Placer::Hrw(h) => h.decide(d),
            Placer::Weighted(w) => w.decide(d),
            Placer::Ahrw(a) => a.decide(d),
            Placer::HierAhrw(h) => h.decide(d).target,
            Placer::CaAhrw(c) => c.decide(d),
            Placer::HierCaAhrw(h) => h.decide(d).target,
            // Tenants are known here; a missing one would be a bug of this file.
            Placer::PsHrw(p, t) => p.route(t[i % 4], d).unwrap_or(0),
        }
    }

    fn queues_mut(&mut self) -> Option<&mut [u64]> {
        match self {
            Placer::Ahrw(a) => Some(a.queues_mut()),
            Placer::HierAhrw(h) => Some(h.queues_mut()),
            Placer::CaAhrw(c) => Some(c.queues_mut()),
            Placer::HierCaAhrw(h) => Some(h.queues_mut()),
            _ => None,
        }
    }
}

/// Paths grouping targets by 4 per level (fan-out at most 4).
fn tree_for(n: usize) -> Result<HierTree, PlaceError> {
    let mut levels = 0;
    let mut span = 1usize;
    while span * 4 < n {
        span *= 4;
        levels += 1;
    }
    let paths: Vec<Vec<u32>> = (0..n)
        .map(|i| {
            let mut s = span;
            (0..levels)
                .map(|_| {
                    let label = (i / s) as u32;
                    s /= 4;
                    label
                })
                .collect()
        })
        .collect();
    HierTree::from_paths(&paths)
}

/// The synthetic topology: two packages when n >= 4, L2 shared by pairs.
fn synthetic_topology(n: usize) -> Result<Topology, PlaceError> {
    let per_package = if n >= 4 { n.div_ceil(2) } else { n };
    Topology::new(
        (0..n as u32)
            .map(|cpu| CpuPlace {
                cpu,
                package: cpu / per_package as u32,
                l2: Some(cpu / 2 * 2),
                llc: None,
            })
            .collect(),
    )
}

struct Machine {
    topology: Topology,
    costs: CostMatrix,
}

/// The `decision` row of AHRW timed with one queue changed before every
/// decision (each decision then recomputes its multipliers).
const AHRW_QUEUE_CHANGED: &str = "ahrw-queue-changed";

/// ns per decision of `decisions` decisions over `flows` in turn; with
/// `change_queues: Some(n)`, queue `i mod n` is bumped before decision `i`.
fn time_decisions(
    p: &mut Placer,
    flows: &[FlowDigest],
    decisions: u64,
    change_queues: Option<usize>,
) -> f64 {
    let t = Instant::now();
    let (mut sum, mut next) = (0usize, 0usize);
    for i in 0..decisions as usize {
        if let Some(n) = change_queues {
            if let Some(q) = p.queues_mut() {
                q[i % n] = q[i % n].wrapping_add(1_500);
            }
        }
        sum = sum.wrapping_add(p.decide(flows[next], i));
        // A wrapping index, not `i % len`: the harness's own cost stays
        // out of the figure as far as it can.
        next += 1;
        if next == flows.len() {
            next = 0;
        }
    }
    let ns = t.elapsed().as_nanos() as f64 / decisions as f64;
    black_box(sum);
    ns
}

fn build(
    variant: &str,
    n: usize,
    weights: &[f64],
    machine: Option<&Machine>,
) -> Result<Placer, PlaceError> {
    let ids: Vec<u32> = (0..n as u32).collect();
    let w: Vec<f64> = (0..n).map(|i| weights[i % weights.len()]).collect();
    Ok(match variant {
        "modulo" => Placer::Modulo(n as u64),
        "hrw" => Placer::Hrw(Hrw::new(ids)?),
        "whrw-log" => Placer::Weighted(WeightedHrw::new(ids, &w, WeightForm::Logarithmic)?),
        "whrw-carp" => Placer::Weighted(WeightedHrw::new(ids, &w, WeightForm::Carp)?),
        "ahrw" => Placer::Ahrw(Ahrw::new(ids, MinQueue::NonZero)?),
        "h-ahrw" => Placer::HierAhrw(HierAhrw::new(
            tree_for(n)?,
            MinQueue::NonZero,
            Aggregate::Sum,
        )),
        "ca-ahrw" | "h-cahrw" => {
            let (tree, costs) = match machine {
                Some(m) => (m.topology.tree()?, m.costs.clone()),
                None => {
                    let t = synthetic_topology(n)?;
                    (t.tree()?, t.cost_matrix(&CostRatios::default())?)
                }
            };
            if variant == "ca-ahrw" {
                Placer::CaAhrw(CaAhrw::new(ids, costs, MinQueue::NonZero)?)
            } else {
                Placer::HierCaAhrw(HierCaAhrw::new(tree, costs, MinQueue::NonZero)?)
            }
        }
        _ => {
            let mut ps = PsHrw::new(ids, 4, DEFAULT_BETA)?;
            let mut t = [TenantId(0); 4];
            for (k, slot) in t.iter_mut().enumerate() {
                *slot = ps.add_tenant(FlowDigest::of_u64(k as u64), 1_000.0 * (k + 1) as f64)?;
            }
            Placer::PsHrw(ps, t)
        }
    })
}

/// Expected share of each target under a variant.
fn expected_shares(variant: &str, n: usize, weights: &[f64]) -> Vec<f64> {
    if variant.starts_with("whrw") {
        let w: Vec<f64> = (0..n).map(|i| weights[i % weights.len()]).collect();
        let sum: f64 = w.iter().sum();
        w.iter().map(|x| x / sum).collect()
    } else {
        vec![1.0 / n as f64; n]
    }
}

fn parse_list<T: std::str::FromStr>(flag: &str, text: &str) -> anyhow::Result<Vec<T>> {
    let items: Vec<&str> = text.split(',').map(str::trim).collect();
    if items.iter().any(|s| s.is_empty()) {
        return Err(usage(format!("{flag}: empty item in {text:?}")));
    }
    items
        .iter()
        .map(|s| {
            s.parse::<T>()
                .map_err(|_| usage(format!("{flag}: {s:?} is not a number")))
        })
        .collect()
}

fn check<T: PartialOrd + std::fmt::Display>(
    flag: &str,
    value: T,
    range: std::ops::RangeInclusive<T>,
) -> anyhow::Result<()> {
    if range.contains(&value) {
        Ok(())
    } else {
        Err(usage(format!(
            "{flag} must be {}..={}, got {value}",
            range.start(),
            range.end()
        )))
    }
}

/// Runs the command.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let targets: Vec<usize> = parse_list("--targets", &args.targets)?;
    for &n in &targets {
        check("--targets", n, 1..=1024)?;
    }
    let weights: Vec<f64> = parse_list("--weights", &args.weights)?;
    // The core's check names the weight and says what is allowed.
    WeightedHrw::with_weights(&weights, WeightForm::Logarithmic)
        .map_err(|e| usage(format!("--weights: {e}")))?;
    check("--flows", args.flows, 1..=10_000_000)?;
    check("--packets", args.packets, 1..=100_000_000)?;
    if !(args.zipf.is_finite() && args.zipf >= 0.0) {
        return Err(usage(format!(
            "--zipf must be finite and >= 0, got {}",
            args.zipf
        )));
    }
    check("--decisions", args.decisions, 1..=1_000_000_000)?;
    check("--repeat", args.repeat, 1..=1000)?;
    check("--runtime-dispatchers", args.runtime_dispatchers, 0..=64)?;
    check("--runtime-packets", args.runtime_packets, 1..=100_000_000)?;
    check("--runtime-tx-ns", args.runtime_tx_ns, 0..=100_000)?;
    check("--arbiter-runs", args.arbiter_runs, 0..=1000)?;
    check("--arbiter-clients", args.arbiter_clients, 1..=64)?;
    check("--arbiter-ms", args.arbiter_ms, 1..=60_000)?;
    check("--arbiter-spin-us", args.arbiter_spin_us, 0..=100_000)?;
    let arbiter_alg = pspat_sched::AlgKind::parse(&args.arbiter_alg)
        .map_err(|e| usage(format!("--arbiter-alg: {e}")))?;
    if let Some(c) = args.arbiter_client_cpu {
        let ncpu = std::thread::available_parallelism().map_or(1, |n| n.get());
        check("--arbiter-client-cpu", c, 0..=ncpu - 1)?;
    }
    let machine = match &args.topology {
        Some(arg) => {
            let (topology, ratios) = load_topology(arg)?;
            let n = topology.cpus().len();
            let costs = match &args.cost_matrix {
                Some(path) => load_cost_matrix(path, n)?,
                None => topology
                    .cost_matrix(&ratios)
                    .map_err(|e| usage(format!("--topology {arg}: {e}")))?,
            };
            Some(Machine { topology, costs })
        }
        None if args.cost_matrix.is_some() => {
            return Err(usage(
                "--cost-matrix needs --topology (the matrix is square over its CPUs)",
            ))
        }
        None => None,
    };

    let mut rng = SplitMix::new(args.seed);
    let flows: Vec<FlowDigest> = (0..args.flows).map(|_| FlowDigest(rng.next())).collect();
    let zipf_cdf = zipf_cdf(args.flows, args.zipf);

    let mut report = Report {
        schema_version: 1,
        config: Config {
            targets: targets.clone(),
            weights: weights.clone(),
            flows: args.flows,
            packets: args.packets,
            zipf: args.zipf,
            decisions: args.decisions,
            repeat: args.repeat,
            seed: args.seed,
            topology: args.topology.clone(),
            arbiter_runs: args.arbiter_runs,
            arbiter_clients: args.arbiter_clients,
            arbiter_ms: args.arbiter_ms,
            arbiter_alg: args.arbiter_alg.clone(),
            arbiter_client_cpu: args.arbiter_client_cpu,
            arbiter_spin_us: args.arbiter_spin_us,
            arbiter_spin_yields: args.arbiter_spin_yields,
        },
        decision: Vec::new(),
        balance: Vec::new(),
        disruption: Vec::new(),
        runtime: Vec::new(),
        arbiters: Vec::new(),
    };
    // (variant, N, machine): the sweep, then the given topology's CPU count.
    let mut cells: Vec<(&'static str, usize, Option<&Machine>)> = Vec::new();
    for &n in &targets {
        for v in VARIANTS {
            cells.push((v, n, None));
        }
    }
    if let Some(m) = &machine {
        for v in ["ca-ahrw", "h-cahrw"] {
            cells.push((v, m.topology.cpus().len(), Some(m)));
        }
    }
    for &(variant, n, m) in &cells {
        let build = |n| {
            build(variant, n, &weights, m)
                .map_err(|e| usage(format!("{variant} at {n} targets: {e}")))
        };
        // Decision cost: a fixed random queue snapshot per timed run; AHRW
        // also with one queue changed before every decision, so each
        // decision recomputes the multipliers.
        let rows: &[(&'static str, Option<usize>)] = if variant == "ahrw" {
            &[(variant, None), (AHRW_QUEUE_CHANGED, Some(n))]
        } else {
            &[(variant, None)]
        };
        for &(row, change_queues) in rows {
            let mut times = Vec::with_capacity(args.repeat as usize);
            for r in 0..args.repeat {
                let mut p = build(n)?;
                let mut qrng = SplitMix::new(args.seed ^ (r as u64 + 1));
                if let Some(q) = p.queues_mut() {
                    for b in q.iter_mut() {
                        *b = qrng.next() % 1_000_000;
                    }
                }
                times.push(time_decisions(
                    &mut p,
                    &flows,
                    args.decisions,
                    change_queues,
                ));
            }
            times.sort_by(f64::total_cmp);
            report.decision.push(Decision {
                variant: row,
                targets: n,
                ns_per_decision: times[times.len() / 2],
            });
        }
        if variant == "ps-hrw" {
            continue;
        }
        // Balance.
        let expected = expected_shares(variant, n, &weights);
        for (population, cdf) in [("uniform", None), ("zipf", Some(&zipf_cdf))] {
            let mut p = build(n)?;
            let mut prng = SplitMix::new(args.seed.wrapping_add(7));
            let mut count = vec![0u64; n];
            let drain = (1500.0 / (0.9 * n as f64)) as u64;
            for i in 0..args.packets {
                let k = match cdf {
                    Some(c) => zipf_pick(c, &mut prng),
                    None => (prng.next() % flows.len() as u64) as usize,
                };
                let t = p.decide(flows[k], i);
                count[t] += 1;
                if let Some(q) = p.queues_mut() {
                    q[t] += 1500;
                    for b in q.iter_mut() {
                        *b = b.saturating_sub(drain);
                    }
                }
            }
            let dev = count
                .iter()
                .zip(&expected)
                .map(|(&c, e)| (c as f64 / args.packets as f64 - e).abs())
                .fold(0.0, f64::max);
            report.balance.push(Balance {
                variant,
                targets: n,
                population,
                max_share_deviation: dev,
            });
        }
        // Disruption (the sweep only: a given topology has no N+1).
        if m.is_none() {
            let mut before = build(n)?;
            let mut after = build(n + 1)?;
            let moved = flows
                .iter()
                .enumerate()
                .filter(|&(i, &f)| before.decide(f, i) != after.decide(f, i))
                .count();
            let new_share = expected_shares(variant, n + 1, &weights)[n];
            report.disruption.push(Disruption {
                variant,
                targets: n,
                moved_fraction_adding_one: moved as f64 / flows.len() as f64,
                optimal_moved_fraction: new_share,
            });
        }
    }
    if args.runtime_dispatchers > 0 {
        for placement in pspat::DispatchPlacement::ALL {
            eprintln!(
                "place-bench: runtime, {placement} over {} dispatchers ...",
                args.runtime_dispatchers
            );
            report
                .runtime
                .push(runtime_run(&args, placement, &zipf_cdf)?);
        }
    }
    if args.arbiter_runs > 0 {
        report.arbiters = arbiters_part(&args, arbiter_alg)?;
    }
    print(&args, &report)?;
    Ok(ExitCode::SUCCESS)
}

/// The arbiters part's backend: counts released packets, sends nothing.
struct CountTx(std::sync::Arc<std::sync::atomic::AtomicU64>);

impl pspat::TxBackend for CountTx {
    fn transmit(&mut self, _now: pspat_sched::Instant, pkts: &[pspat::TxPacket]) {
        // Relaxed: a monotone count read for a rate; it orders nothing.
        self.0
            .fetch_add(pkts.len() as u64, std::sync::atomic::Ordering::Relaxed);
    }

    fn wants_cookies(&self) -> bool {
        false
    }
}

/// The CPU each thread of this process named `name` last ran on, by
/// thread id (`/proc/self/task/*/stat`, field 39).
fn cpus_of_threads(name: &str) -> Vec<Option<usize>> {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return Vec::new();
    };
    let mut found: Vec<(u64, Option<usize>)> = tasks
        .flatten()
        .filter(|t| {
            std::fs::read_to_string(t.path().join("comm")).is_ok_and(|c| c.trim_end() == name)
        })
        .filter_map(|t| {
            let tid = t.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(t.path().join("stat")).ok();
            let cpu = stat.as_deref().and_then(|s| {
                s.rsplit_once(')')?
                    .1
                    .split_whitespace()
                    .nth(39 - 3)?
                    .parse()
                    .ok()
            });
            Some((tid, cpu))
        })
        .collect();
    found.sort_unstable();
    found.into_iter().map(|(_, c)| c).collect()
}

/// What one run of a node measured.
struct NodeRun {
    /// Packets released per second.
    rate: f64,
    /// Where the threads ran.
    threads: Vec<ThreadCpu>,
    /// Times the arbiters parked.
    parks: u64,
    /// CPU ns of the arbiter threads per released packet.
    arbiter_ns: f64,
    /// CPU ns of the client threads per released packet.
    client_ns: f64,
}

/// CPU time (ns) of each of this process's threads whose name starts with
/// `prefix`, by thread id, from `/proc/self/task/*/schedstat` (none where
/// unreadable).
fn cpu_ns_by_thread(prefix: &str) -> std::collections::BTreeMap<u64, u64> {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return Default::default();
    };
    tasks
        .flatten()
        .filter(|t| {
            std::fs::read_to_string(t.path().join("comm")).is_ok_and(|c| c.starts_with(prefix))
        })
        .filter_map(|t| {
            let tid = t.file_name().to_str()?.parse().ok()?;
            let ns = std::fs::read_to_string(t.path().join("schedstat"))
                .ok()?
                .split_whitespace()
                .next()?
                .parse::<u64>()
                .ok()?;
            Some((tid, ns))
        })
        .collect()
}

/// CPU ns that the threads of `ours` used between the readings `before`
/// and `after` ([`cpu_ns_by_thread`]): a thread that is not in both (one
/// that started or ended in between, or another runtime's of the same
/// name) counts nothing, so no exit can make the sum go backwards.
fn cpu_ns_between(
    ours: &std::collections::BTreeSet<u64>,
    before: &std::collections::BTreeMap<u64, u64>,
    after: &std::collections::BTreeMap<u64, u64>,
) -> u64 {
    ours.iter()
        .filter_map(|t| Some(after.get(t)?.saturating_sub(*before.get(t)?)))
        .sum()
}

/// One run of a node with `links` links (see `--help`): decisions/s and
/// where the threads ran.
fn node_run(args: &Args, alg: pspat_sched::AlgKind, links: usize) -> anyhow::Result<NodeRun> {
    use pspat_sched::{FlowId, FlowTable, SchedulerConfig};
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::sync::Arc;
    use std::time::Duration;
    let ncpu = std::thread::available_parallelism().map_or(1, |n| n.get());
    let flows = args.flows.min(pspat::MAX_FLOW_ID as usize + 1);
    // The arbiters this node starts: those of that name that were not
    // there before (another runtime of this process may have its own).
    let others: std::collections::BTreeSet<u64> =
        cpu_ns_by_thread("pspat-arbiter").into_keys().collect();
    let node: pspat::node::Node<CountTx> = pspat::node::Node::new();
    let mut counts = Vec::with_capacity(links);
    for e in 0..links {
        let mut cfg = pspat::RuntimeConfig::default();
        cfg.dispatchers = 0;
        cfg.max_clients = args.arbiter_clients;
        cfg.arbiter_core = Some(e % ncpu);
        cfg.spin_ns = args.arbiter_spin_us * 1_000;
        cfg.spin_yields = args.arbiter_spin_yields;
        let mut sc = SchedulerConfig::new(alg);
        sc.capacity = args.arbiter_clients * cfg.descriptors_per_client;
        let table = FlowTable::uniform(flows).map_err(|e| usage(format!("--flows: {e}")))?;
        let sched = sc
            .build(table)
            .map_err(|e| usage(format!("scheduler: {e}")))?;
        let count = Arc::new(AtomicU64::new(0));
        let c = Arc::clone(&count);
        node.add_link(cfg, sched, move |_| CountTx(Arc::clone(&c)))?;
        counts.push(count);
    }
    let stop = Arc::new(AtomicBool::new(false));
    let mut clients = Vec::with_capacity(args.arbiter_clients);
    for c in 0..args.arbiter_clients {
        let mut client = node.client();
        let stop = Arc::clone(&stop);
        let stride = args.arbiter_clients;
        let pin = args.arbiter_client_cpu;
        clients.push(
            std::thread::Builder::new()
                .name(format!("pspat-pb-client-{c}"))
                .spawn(move || -> Result<Option<usize>, String> {
                    if let Some(cpu) = pin {
                        core_affinity::set_for_current(core_affinity::CoreId { id: cpu });
                    }
                    let mut f = c % flows;
                    // Acquire: pairs with the Release store that ends the run.
                    while !stop.load(Ordering::Acquire) {
                        for _ in 0..64 {
                            let s = pspat::Submission {
                                flow: FlowId(f as u32),
                                len: 60,
                                cookie: 0,
                                ect: false,
                            };
                            match client.submit(s) {
                                Ok(_) => f = (f + stride) % flows,
                                Err(pspat::SubmitError::Full(_)) => {
                                    client.wait_for_room(s.flow, Duration::from_millis(1));
                                }
                                Err(e) => return Err(e.to_string()),
                            }
                        }
                    }
                    drop(client);
                    Ok(pspat_io::cpu::current_cpu())
                })?,
        );
    }
    let read = || -> u64 {
        counts
            .iter()
            .map(|c| c.load(Ordering::Relaxed))
            .sum::<u64>()
    };
    std::thread::sleep(Duration::from_millis(100));
    let cpu0 = (
        cpu_ns_by_thread("pspat-arbiter"),
        cpu_ns_by_thread("pspat-pb-client"),
    );
    // This node's threads, named by now (a thread names itself once it
    // runs): the arbiters that were not there before it, the clients
    // alive now.
    let arbiters: std::collections::BTreeSet<u64> = cpu0
        .0
        .keys()
        .filter(|t| !others.contains(t))
        .copied()
        .collect();
    let client_tids: std::collections::BTreeSet<u64> = cpu0.1.keys().copied().collect();
    let (t0, n0) = (Instant::now(), read());
    std::thread::sleep(Duration::from_millis(args.arbiter_ms));
    let (t1, n1) = (Instant::now(), read());
    let cpu1 = (
        cpu_ns_by_thread("pspat-arbiter"),
        cpu_ns_by_thread("pspat-pb-client"),
    );
    let arbiter_cpus = cpus_of_threads("pspat-arbiter");
    // Release: pairs with the clients' Acquire loads.
    stop.store(true, Ordering::Release);
    let mut threads: Vec<ThreadCpu> = (0..links)
        .map(|e| ThreadCpu {
            role: format!("arbiter-{e}"),
            cpu: arbiter_cpus.get(e).copied().flatten().or(Some(e % ncpu)),
            pinned: true,
        })
        .collect();
    let mut failure = None;
    for (c, h) in clients.into_iter().enumerate() {
        match h.join() {
            Ok(Ok(cpu)) => threads.push(ThreadCpu {
                role: format!("client-{c}"),
                cpu,
                pinned: args.arbiter_client_cpu.is_some(),
            }),
            Ok(Err(e)) => failure = Some(e),
            Err(_) => failure = Some(format!("client {c} panicked")),
        }
    }
    let finished = node.shutdown()?;
    if let Some(e) = failure.or_else(|| {
        finished
            .iter()
            .find_map(|(_, f)| f.error.as_ref().map(|e| e.to_string()))
    }) {
        anyhow::bail!("place-bench arbiters: {e}");
    }
    let rate = (n1 - n0) as f64 / (t1 - t0).as_secs_f64();
    let parks = finished.iter().map(|(_, f)| f.arbiter.sleeps).sum();
    let per_packet = |ns: u64| ns as f64 / (n1 - n0).max(1) as f64;
    Ok(NodeRun {
        rate,
        threads,
        parks,
        arbiter_ns: per_packet(cpu_ns_between(&arbiters, &cpu0.0, &cpu1.0)),
        client_ns: per_packet(cpu_ns_between(&client_tids, &cpu0.1, &cpu1.1)),
    })
}

/// The arbiters part: 1 and 2 arbiters in alternation, medians.
fn arbiters_part(args: &Args, alg: pspat_sched::AlgKind) -> anyhow::Result<Vec<ArbiterRow>> {
    let mut runs: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
    let mut threads: [Vec<ThreadCpu>; 2] = [Vec::new(), Vec::new()];
    let mut parks = [0u64; 2];
    let mut cpu: [Vec<(f64, f64)>; 2] = [Vec::new(), Vec::new()];
    for r in 0..args.arbiter_runs {
        for (i, links) in [1usize, 2].into_iter().enumerate() {
            eprintln!(
                "place-bench: arbiters, run {}/{} with {links} arbiter(s) ...",
                r + 1,
                args.arbiter_runs
            );
            let run = node_run(args, alg, links)?;
            runs[i].push(run.rate);
            cpu[i].push((run.arbiter_ns, run.client_ns));
            threads[i] = run.threads;
            parks[i] = run.parks;
        }
    }
    let median = |v: &[f64]| {
        let mut v = v.to_vec();
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let one = median(&runs[0]);
    Ok((0..2)
        .map(|i| {
            let m = median(&runs[i]);
            ArbiterRow {
                arbiters: i + 1,
                links: i + 1,
                clients: args.arbiter_clients,
                decisions_per_s: m,
                ratio_to_one: if one > 0.0 { m / one } else { 0.0 },
                runs_decisions_per_s: runs[i].clone(),
                arbiter_cpu_ns_per_decision: median(
                    &cpu[i].iter().map(|c| c.0).collect::<Vec<_>>(),
                ),
                client_cpu_ns_per_packet: median(&cpu[i].iter().map(|c| c.1).collect::<Vec<_>>()),
                arbiter_parks: parks[i],
                threads: threads[i].clone(),
            }
        })
        .collect())
}

/// Counts per dispatcher and checks per-flow order across dispatchers.
#[derive(Clone)]
struct OrderCheck {
    /// Next sequence number expected per flow (highest seen + 1).
    next: std::sync::Arc<[std::sync::atomic::AtomicU64]>,
    reorders: std::sync::Arc<std::sync::atomic::AtomicU64>,
    packets: u64,
    work_ns: u64,
}

impl pspat::TxBackend for OrderCheck {
    fn transmit(&mut self, _now: pspat_sched::Instant, pkts: &[pspat::TxPacket]) {
        use std::sync::atomic::Ordering::Relaxed;
        for p in pkts {
            let seen = self.next[p.flow.index()].fetch_max(p.cookie + 1, Relaxed);
            if seen > p.cookie {
                self.reorders.fetch_add(1, Relaxed);
            }
            let until = Instant::now() + std::time::Duration::from_nanos(self.work_ns);
            while Instant::now() < until {
                std::hint::spin_loop();
            }
        }
        self.packets += pkts.len() as u64;
    }
}

/// One placement through the threaded runtime (see `--help`).
fn runtime_run(
    args: &Args,
    placement: pspat::DispatchPlacement,
    zipf_cdf: &[f64],
) -> anyhow::Result<RuntimeRow> {
    use pspat_sched::{AlgKind, FlowId, FlowTable, SchedulerConfig};
    let flows = args.flows;
    let next: std::sync::Arc<[std::sync::atomic::AtomicU64]> = (0..flows)
        .map(|_| std::sync::atomic::AtomicU64::new(0))
        .collect();
    let backend = OrderCheck {
        next,
        reorders: Default::default(),
        packets: 0,
        work_ns: args.runtime_tx_ns,
    };
    let reorders = backend.reorders.clone();
    let mut cfg = pspat::RuntimeConfig::default();
    cfg.dispatchers = args.runtime_dispatchers;
    cfg.dispatch_placement = placement;
    cfg.max_clients = 1;
    let table = FlowTable::uniform(flows).map_err(|e| usage(format!("--flows: {e}")))?;
    let mut sc = SchedulerConfig::new(AlgKind::Fifo);
    sc.capacity = 4096;
    let sched = sc
        .build(table)
        .map_err(|e| usage(format!("scheduler: {e}")))?;
    let rt = pspat::Runtime::start(cfg, sched, move |_| backend.clone())?;
    let mut client = rt.client()?;
    let mut seq = vec![0u64; flows];
    let mut rng = SplitMix::new(args.seed.wrapping_add(11));
    let mut sent = 0u64;
    while sent < args.runtime_packets {
        let f = zipf_pick(zipf_cdf, &mut rng);
        let mut s = pspat::Submission {
            flow: FlowId(f as u32),
            len: 60,
            cookie: seq[f],
            ect: false,
        };
        loop {
            match client.submit(s) {
                Ok(_) => break,
                Err(pspat::SubmitError::Full(back)) => {
                    s = back;
                    client.wait_for_room(std::time::Duration::from_millis(100));
                }
                Err(e) => anyhow::bail!("place-bench runtime: {e}"),
            }
        }
        seq[f] += 1;
        sent += 1;
    }
    drop(client);
    let finished = rt.shutdown()?;
    if let Some(e) = finished.error {
        anyhow::bail!("place-bench runtime: {e}");
    }
    let loads: Vec<u64> = finished.backends.iter().map(|b| b.packets).collect();
    let total: u64 = loads.iter().sum();
    let mean = total as f64 / args.runtime_dispatchers as f64;
    let max = loads.iter().copied().max().unwrap_or(0) as f64;
    Ok(RuntimeRow {
        variant: placement.name(),
        dispatchers: args.runtime_dispatchers,
        packets: total,
        max_over_mean_load: if mean > 0.0 { max / mean } else { 0.0 },
        reorders: reorders.load(std::sync::atomic::Ordering::Relaxed),
    })
}

fn zipf_cdf(n: usize, s: f64) -> Vec<f64> {
    let mut acc = 0.0;
    let mut cdf: Vec<f64> = (1..=n)
        .map(|k| {
            acc += (k as f64).powf(-s);
            acc
        })
        .collect();
    for c in &mut cdf {
        *c /= acc;
    }
    cdf
}

fn zipf_pick(cdf: &[f64], rng: &mut SplitMix) -> usize {
    let u = (rng.next() >> 11) as f64 / (1u64 << 53) as f64;
    cdf.partition_point(|&c| c < u).min(cdf.len() - 1)
}

/// A small seeded generator (SplitMix64), so the CLI needs no RNG crate.
struct SplitMix(u64);

impl SplitMix {
    fn new(seed: u64) -> Self {
        SplitMix(seed)
    }

    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

fn print(args: &Args, r: &Report) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    if args.json {
        serde_json::to_writer(&mut out, r)?;
        writeln!(out)?;
        return Ok(());
    }
    writeln!(
        out,
        "decision cost (ns per decision, median of {} runs)",
        args.repeat
    )?;
    writeln!(out, "{:<10} {:>8} {:>10}", "variant", "targets", "ns")?;
    for d in &r.decision {
        writeln!(
            out,
            "{:<10} {:>8} {:>10.1}",
            d.variant, d.targets, d.ns_per_decision
        )?;
    }
    writeln!(
        out,
        "\nbalance (max |share - expected| over targets; {} packets, zipf {})",
        args.packets, args.zipf
    )?;
    writeln!(
        out,
        "{:<10} {:>8} {:>10} {:>10}",
        "variant", "targets", "uniform", "zipf"
    )?;
    for pair in r.balance.chunks(2) {
        if let [u, z] = pair {
            writeln!(
                out,
                "{:<10} {:>8} {:>10.4} {:>10.4}",
                u.variant, u.targets, u.max_share_deviation, z.max_share_deviation
            )?;
        }
    }
    writeln!(
        out,
        "\ndisruption (fraction of {} flows moved when adding one target; optimum = the new target's share)",
        args.flows
    )?;
    writeln!(
        out,
        "{:<10} {:>8} {:>10} {:>10}",
        "variant", "targets", "moved", "1/(N+1)"
    )?;
    for d in &r.disruption {
        writeln!(
            out,
            "{:<10} {:>8} {:>10.4} {:>10.4}",
            d.variant, d.targets, d.moved_fraction_adding_one, d.optimal_moved_fraction
        )?;
    }
    if !r.arbiters.is_empty() {
        writeln!(
            out,
            "\narbiters (pspat::node::Node, {}, unlimited links, counting backend; median of {} alternating runs of {} ms; arbiters pinned one per core, spinning {} µs when idle{}, clients {}; CPU ns per released packet from schedstat)",
            args.arbiter_alg,
            args.arbiter_runs,
            args.arbiter_ms,
            args.arbiter_spin_us,
            if args.arbiter_spin_yields { " (yielding)" } else { "" },
            args.arbiter_client_cpu
                .map_or("unpinned".to_string(), |c| format!("pinned to CPU {c}"))
        )?;
        writeln!(
            out,
            "{:>8} {:>6} {:>8} {:>16} {:>9} {:>8} {:>12} {:>12}  threads (last CPU)",
            "arbiters",
            "links",
            "clients",
            "decisions/s",
            "ratio",
            "parks",
            "arb ns/pkt",
            "cli ns/pkt"
        )?;
        for a in &r.arbiters {
            let threads: Vec<String> = a
                .threads
                .iter()
                .map(|t| {
                    let cpu = t.cpu.map_or("?".to_string(), |c| c.to_string());
                    let how = if t.pinned { " (pinned)" } else { "" };
                    format!("{} cpu {cpu}{how}", t.role)
                })
                .collect();
            writeln!(
                out,
                "{:>8} {:>6} {:>8} {:>16.0} {:>9.3} {:>8} {:>12.1} {:>12.1}  {}",
                a.arbiters,
                a.links,
                a.clients,
                a.decisions_per_s,
                a.ratio_to_one,
                a.arbiter_parks,
                a.arbiter_cpu_ns_per_decision,
                a.client_cpu_ns_per_packet,
                threads.join(", ")
            )?;
        }
    }
    if !r.runtime.is_empty() {
        writeln!(
            out,
            "\nthrough the runtime (dispatcher load: busiest over mean; reorders must be 0 except round-robin)"
        )?;
        writeln!(
            out,
            "{:<12} {:>11} {:>10} {:>13} {:>9}",
            "placement", "dispatchers", "packets", "max/mean", "reorders"
        )?;
        for x in &r.runtime {
            writeln!(
                out,
                "{:<12} {:>11} {:>10} {:>13.3} {:>9}",
                x.variant, x.dispatchers, x.packets, x.max_over_mean_load, x.reorders
            )?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiny() -> Args {
        Args {
            targets: "2,5".into(),
            flows: 2_000,
            packets: 5_000,
            decisions: 1_000,
            repeat: 1,
            arbiter_runs: 1,
            arbiter_ms: 20,
            ..Args::default()
        }
    }

    #[test]
    fn every_variant_runs_on_small_and_odd_sizes() {
        for n in [1usize, 2, 3, 5, 17, 64] {
            for v in VARIANTS {
                let mut p = build(v, n, &[1.0, 2.0], None).unwrap();
                for i in 0..100 {
                    assert!(p.decide(FlowDigest(i as u64 * 7919), i) < n, "{v} at {n}");
                }
            }
            let t = tree_for(n).unwrap();
            assert_eq!(t.targets(), n);
            assert!(t.fanouts_to(n - 1).unwrap().iter().all(|&f| f <= 4));
        }
        assert!(run(tiny()).is_ok());
    }

    #[test]
    fn the_arbiters_part_reports_both_configurations_and_every_thread() {
        let args = Args {
            arbiter_runs: 2,
            arbiter_ms: 20,
            flows: 256,
            ..tiny()
        };
        let rows = arbiters_part(&args, pspat_sched::AlgKind::Drr).unwrap();
        assert_eq!(rows.len(), 2);
        for (i, row) in rows.iter().enumerate() {
            assert_eq!((row.arbiters, row.links, row.clients), (i + 1, i + 1, 2));
            assert_eq!(row.runs_decisions_per_s.len(), 2);
            assert!(row.decisions_per_s > 0.0, "packets were released");
            if std::path::Path::new("/proc/self/schedstat").exists() {
                // Threads that released packets used CPU to do it.
                assert!(row.arbiter_cpu_ns_per_decision > 0.0, "{row:?}");
                assert!(row.client_cpu_ns_per_packet > 0.0, "{row:?}");
            }
            let roles: Vec<&str> = row.threads.iter().map(|t| t.role.as_str()).collect();
            let mut expected: Vec<String> = (0..=i).map(|e| format!("arbiter-{e}")).collect();
            expected.extend((0..2).map(|c| format!("client-{c}")));
            assert_eq!(roles, expected);
            assert!(row.threads[..=i].iter().all(|t| t.pinned));
        }
        assert_eq!(rows[0].ratio_to_one, 1.0);
        assert_eq!(
            rows[1].ratio_to_one,
            rows[1].decisions_per_s / rows[0].decisions_per_s
        );
    }

    #[test]
    fn bad_flags_are_usage_errors() {
        for args in [
            Args {
                targets: "0".into(),
                ..tiny()
            },
            Args {
                targets: "2,x".into(),
                ..tiny()
            },
            Args {
                weights: "1,0".into(),
                ..tiny()
            },
            Args {
                weights: "1,-2".into(),
                ..tiny()
            },
            Args {
                weights: "nan".into(),
                ..tiny()
            },
            Args {
                weights: "inf".into(),
                ..tiny()
            },
            Args { flows: 0, ..tiny() },
            Args {
                zipf: -1.0,
                ..tiny()
            },
            Args {
                repeat: 0,
                ..tiny()
            },
            Args {
                arbiter_clients: 0,
                ..tiny()
            },
            Args {
                arbiter_ms: 0,
                ..tiny()
            },
            Args {
                arbiter_alg: "nope".into(),
                ..tiny()
            },
            Args {
                arbiter_client_cpu: Some(100_000),
                ..tiny()
            },
            Args {
                cost_matrix: Some("m.json".into()),
                ..tiny()
            },
            Args {
                topology: Some("/nonexistent/topology.json".into()),
                ..tiny()
            },
        ] {
            let e = run(args).unwrap_err();
            assert!(e.downcast_ref::<crate::UsageError>().is_some(), "{e}");
        }
    }
}
