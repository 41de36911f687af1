//! Placement (the HRW family): the acceptance properties H1–H11 of HRW,
//! weighted HRW, AHRW, H-AHRW, CA-AHRW, H-CAHRW, PS-HRW and the flowlet
//! guard, plus bad input. Seeds are fixed, so every figure is reproducible.

use std::collections::{HashMap, VecDeque};

use pspat_sched::place::{
    carp_multipliers, parse_cpu_list, weight, Aggregate, Ahrw, CaAhrw, CostMatrix, CostRatios,
    CpuPlace, FlowDigest, FlowletGuard, HierAhrw, HierCaAhrw, HierTree, Hrw, MinQueue, PlaceError,
    PsHrw, SysfsCache, SysfsCpu, Topology, WeightForm, WeightedHrw, DEFAULT_BETA,
};

fn random_digests(n: usize, seed: u64) -> Vec<FlowDigest> {
    let mut rng = fastrand::Rng::with_seed(seed);
    (0..n).map(|_| FlowDigest(rng.u64(..))).collect()
}

fn shares(targets: usize, picks: impl Iterator<Item = usize>) -> Vec<f64> {
    let mut count = vec![0u64; targets];
    let mut total = 0u64;
    for t in picks {
        count[t] += 1;
        total += 1;
    }
    count.iter().map(|&c| c as f64 / total as f64).collect()
}

fn max_deviation(shares: &[f64], expected: &[f64]) -> f64 {
    shares
        .iter()
        .zip(expected)
        .map(|(s, e)| (s - e).abs())
        .fold(0.0, f64::max)
}

/// Zipf(s) over `n` ranks: a cumulative table to sample from.
fn zipf_cdf(n: usize, s: f64) -> Vec<f64> {
    let mut acc = 0.0;
    let mut cdf: Vec<f64> = (1..=n)
        .map(|k| {
            acc += 1.0 / (k as f64).powf(s);
            acc
        })
        .collect();
    for c in &mut cdf {
        *c /= acc;
    }
    cdf
}

fn zipf_pick(cdf: &[f64], rng: &mut fastrand::Rng) -> usize {
    let u = rng.f64();
    cdf.partition_point(|&c| c < u).min(cdf.len() - 1)
}

// ---------------------------------------------------------------- H1

#[test]
fn h1_affinity_and_ahrw_equals_hrw_on_equal_or_zero_queues() {
    let flows = random_digests(10_000, 1);
    let hrw = Hrw::with_targets(8).unwrap();
    let mut ahrw = Ahrw::with_targets(8, MinQueue::NonZero).unwrap();
    let mut ahrw_all = Ahrw::with_targets(8, MinQueue::All).unwrap();
    let mut rng = fastrand::Rng::with_seed(2);
    let mut first: HashMap<FlowDigest, usize> = HashMap::new();
    for queues in [0u64, 4_500] {
        ahrw.queues_mut().fill(queues);
        ahrw_all.queues_mut().fill(queues);
        for _ in 0..100_000 {
            let f = flows[rng.usize(..flows.len())];
            let t = hrw.decide(f);
            assert_eq!(*first.entry(f).or_insert(t), t, "a flow left its node");
            assert_eq!(
                ahrw.decide(f),
                t,
                "AHRW differs from HRW at queues {queues}"
            );
            assert_eq!(ahrw_all.decide(f), t);
        }
    }
    assert!(first.len() > 9_900);
}

// ---------------------------------------------------------------- H2, H3

#[test]
fn h2_balance_of_random_digests() {
    for n in [2usize, 4, 8] {
        let hrw = Hrw::with_targets(n).unwrap();
        let s = shares(
            n,
            random_digests(200_000, n as u64)
                .into_iter()
                .map(|d| hrw.decide(d)),
        );
        let dev = max_deviation(&s, &vec![1.0 / n as f64; n]);
        assert!(dev <= 0.01, "N = {n}: shares {s:?}");
    }
}

#[test]
fn h3_balance_of_structured_keys_through_the_digest() {
    for n in [2usize, 4, 8] {
        let hrw = Hrw::with_targets(n).unwrap();
        // Sequential integers.
        let seq = shares(
            n,
            (0..200_000u64).map(|k| hrw.decide(FlowDigest::of_u64(k))),
        );
        // 5-tuples of one subnet: addresses and ports that differ in few bits.
        let tuples = shares(
            n,
            (0..200_000u32).map(|i| {
                let mut key = [0u8; 13];
                key[..4].copy_from_slice(&[10, 0, (i >> 8) as u8, i as u8]);
                key[4..8].copy_from_slice(&[10, 1, 0, 1]);
                key[8..10].copy_from_slice(&(1024 + (i % 50_000) as u16).to_be_bytes());
                key[10..12].copy_from_slice(&80u16.to_be_bytes());
                key[12] = 17;
                hrw.decide(FlowDigest::of_bytes(&key))
            }),
        );
        let even = vec![1.0 / n as f64; n];
        assert!(max_deviation(&seq, &even) <= 0.01, "N = {n}: {seq:?}");
        assert!(max_deviation(&tuples, &even) <= 0.01, "N = {n}: {tuples:?}");
    }
}

// ---------------------------------------------------------------- H4, H5

#[test]
fn h4_adding_a_node_moves_one_in_n_plus_one_all_onto_it() {
    let flows = random_digests(200_000, 4);
    for n in [2usize, 4, 8] {
        let before = Hrw::with_targets(n).unwrap();
        let after = Hrw::with_targets(n + 1).unwrap();
        let mut moved = 0usize;
        let mut modulo_moved = 0usize;
        for &f in &flows {
            let (a, b) = (before.decide(f), after.decide(f));
            if a != b {
                moved += 1;
                assert_eq!(b, n, "a flow moved between old nodes");
            }
            if f.0 % n as u64 != f.0 % (n as u64 + 1) {
                modulo_moved += 1;
            }
        }
        let frac = moved as f64 / flows.len() as f64;
        let ideal = 1.0 / (n as f64 + 1.0);
        assert!((frac - ideal).abs() <= 0.01, "N = {n}: moved {frac}");
        // Modulo hashing moves about N/(N+1): the contrast HRW is for.
        let modulo = modulo_moved as f64 / flows.len() as f64;
        assert!((modulo - n as f64 / (n as f64 + 1.0)).abs() < 0.01);
    }
}

#[test]
fn h5_removing_node_k_moves_only_its_flows() {
    let flows = random_digests(100_000, 5);
    let all = Hrw::new((0..8).collect()).unwrap();
    for k in 0..8u32 {
        let rest = Hrw::new((0..8).filter(|&i| i != k).collect()).unwrap();
        let mut moved = 0;
        for &f in &flows {
            let before = all.ids()[all.decide(f)];
            let after = rest.ids()[rest.decide(f)];
            if before != k {
                assert_eq!(before, after, "flow of node {before} moved when {k} left");
            } else {
                moved += 1;
            }
        }
        assert!(moved > 10_000, "node {k} held {moved} flows");
    }
}

// ---------------------------------------------------------------- H6

#[test]
fn h6_ahrw_diversion_law() {
    let flows = random_digests(200_000, 6);
    for rho in [1.5f64, 2.0, 4.0] {
        let mut a = Ahrw::with_targets(2, MinQueue::NonZero).unwrap();
        let hrw = Hrw::with_targets(2).unwrap();
        // Target 0 is loaded rho times more than target 1.
        a.queues_mut()
            .copy_from_slice(&[(1_000_000.0 * rho) as u64, 1_000_000]);
        let (mut homed, mut moved) = (0usize, 0usize);
        for &f in &flows {
            if hrw.decide(f) == 0 {
                homed += 1;
                if a.decide(f) == 1 {
                    moved += 1;
                }
            } else {
                assert_eq!(a.decide(f), 1, "a flow moved to the loaded node");
            }
        }
        let frac = moved as f64 / homed as f64;
        assert!(
            (frac - (1.0 - 1.0 / rho)).abs() <= 0.02,
            "rho {rho}: diverted {frac}"
        );
    }
}

#[test]
fn ahrw_keeps_the_home_when_idle_and_min_all_restricts_to_idle_nodes() {
    let flows = random_digests(20_000, 61);
    let hrw = Hrw::with_targets(4).unwrap();
    let mut nz = Ahrw::with_targets(4, MinQueue::NonZero).unwrap();
    let mut all = Ahrw::with_targets(4, MinQueue::All).unwrap();
    let q = [0u64, 9_000, 3_000, 6_000];
    nz.queues_mut().copy_from_slice(&q);
    all.queues_mut().copy_from_slice(&q);
    for &f in &flows {
        let home = hrw.decide(f);
        if home == 0 {
            assert_eq!(nz.decide(f), 0, "an idle home was left");
        }
        // Q_min over all queues is 0: every busy node's weight is 0.
        assert_eq!(all.decide(f), 0);
    }
}

#[test]
fn ahrw_reduces_imbalance_under_zipf_skew() {
    let n = 8usize;
    let flows = random_digests(1_000, 62);
    let cdf = zipf_cdf(flows.len(), 1.0);
    let hrw = Hrw::with_targets(n).unwrap();
    let mut ahrw = Ahrw::with_targets(n, MinQueue::NonZero).unwrap();
    let mut rng = fastrand::Rng::with_seed(63);
    let (mut hrw_count, mut ahrw_count) = (vec![0u64; n], vec![0u64; n]);
    // Each target drains its backlog at 1/n of the arrival rate / 0.9.
    let drain = (1500.0 / (0.9 * n as f64)) as u64;
    for _ in 0..200_000 {
        let f = flows[zipf_pick(&cdf, &mut rng)];
        hrw_count[hrw.decide(f)] += 1;
        let t = ahrw.decide(f);
        ahrw_count[t] += 1;
        let q = ahrw.queues_mut();
        q[t] += 1500;
        for b in q.iter_mut() {
            *b = b.saturating_sub(drain);
        }
    }
    let even = vec![1.0 / n as f64; n];
    let dev = |c: &[u64]| {
        max_deviation(
            &shares(
                n,
                c.iter()
                    .enumerate()
                    .flat_map(|(i, &k)| std::iter::repeat_n(i, k as usize)),
            ),
            &even,
        )
    };
    let (h, a) = (dev(&hrw_count), dev(&ahrw_count));
    assert!(h > 0.05, "the skew must unbalance HRW (deviation {h})");
    assert!(a < h / 2.0, "AHRW deviation {a} vs HRW {h}");
}

// ---------------------------------------------------------------- H7

#[test]
fn h7_weighted_shares_follow_the_weights() {
    let p = [0.1, 0.2, 0.3, 0.4];
    let draws = random_digests(400_000, 7);
    for form in [WeightForm::Logarithmic, WeightForm::Carp] {
        // Weights given as link rates, not normalised.
        let w = WeightedHrw::with_weights(&[1e9, 2e9, 3e9, 4e9], form).unwrap();
        let s = shares(4, draws.iter().map(|&d| w.decide(d)));
        assert!(max_deviation(&s, &p) <= 0.005, "{form:?}: {s:?}");
    }
}

#[test]
fn theorem_7_1_multipliers_match_the_worked_example() {
    let x = carp_multipliers(&[0.1, 0.2, 0.3, 0.4]).unwrap();
    for (got, want) in x.iter().zip([0.7953, 0.9584, 1.0867, 1.2074]) {
        assert!((got - want).abs() < 5e-5, "{x:?}");
    }
    assert!((x.iter().product::<f64>() - 1.0).abs() < 1e-12);
    // Order of the input does not matter; zeros get 0 and never win.
    let y = carp_multipliers(&[0.4, 0.0, 0.1, 0.3, 0.2]).unwrap();
    assert_eq!(y[1], 0.0);
    assert!((y[0] - x[3]).abs() < 1e-12 && (y[2] - x[0]).abs() < 1e-12);
}

#[test]
fn logarithmic_weight_change_moves_only_flows_of_the_changed_target() {
    let flows = random_digests(50_000, 71);
    let before = WeightedHrw::with_weights(&[1.0, 2.0, 3.0, 4.0], WeightForm::Logarithmic).unwrap();
    let after = WeightedHrw::with_weights(&[1.0, 2.0, 6.0, 4.0], WeightForm::Logarithmic).unwrap();
    for &f in &flows {
        let (a, b) = (before.decide(f), after.decide(f));
        if a != b {
            assert_eq!(b, 2, "a flow moved between unchanged targets");
        }
    }
}

// ---------------------------------------------------------------- H8

#[test]
fn h8_eq_6_7_zero_if_any_child_empty_else_the_sum() {
    assert_eq!(Aggregate::ZeroIfAnyChildEmpty.of(&[5.0, 0.0]), 0.0);
    assert_eq!(Aggregate::ZeroIfAnyChildEmpty.of(&[5.0, 7.0, 1.0]), 13.0);
    assert_eq!(Aggregate::Sum.of(&[5.0, 0.0]), 5.0);
    // Through a tree: 2 sockets × 2 L2 × 2 cores, unit costs.
    let tree = HierTree::uniform(&[2, 2, 2]).unwrap();
    let mut h = HierCaAhrw::new(tree, CostMatrix::uniform(8).unwrap(), MinQueue::NonZero).unwrap();
    h.queues_mut()
        .copy_from_slice(&[10, 20, 30, 0, 50, 60, 70, 80]);
    let q = h.node_queues(0).unwrap().to_vec();
    // Breadth-first: root, 2 sockets, 4 L2s, 8 leaves.
    assert_eq!(q.len(), 15);
    assert_eq!(&q[3..7], &[30.0, 0.0, 110.0, 150.0]);
    assert_eq!(&q[1..3], &[0.0, 260.0]);
    assert_eq!(q[0], 0.0);
    // H-AHRW sums plainly.
    let mut plain = HierAhrw::new(
        HierTree::uniform(&[2, 2, 2]).unwrap(),
        MinQueue::NonZero,
        Aggregate::Sum,
    );
    plain
        .queues_mut()
        .copy_from_slice(&[10, 20, 30, 0, 50, 60, 70, 80]);
    let q = plain.node_queues();
    assert_eq!(&q[0..3], &[320.0, 60.0, 260.0]);
}

// ---------------------------------------------------------------- H9

#[test]
fn h9_tree_cost_is_the_sum_of_the_fanouts() {
    let flows = random_digests(5_000, 9);
    let mut h = HierAhrw::new(
        HierTree::uniform(&[8, 2, 4]).unwrap(),
        MinQueue::NonZero,
        Aggregate::Sum,
    );
    let mut rng = fastrand::Rng::with_seed(91);
    for q in h.queues_mut() {
        *q = rng.u64(0..10_000);
    }
    for &f in &flows {
        let d = h.decide(f);
        assert_eq!(
            d.evaluations,
            8 + 2 + 4,
            "Niagara 2: 14 evaluations, not 64"
        );
    }
    // A lopsided tree: socket 0 has 3 L2 groups of 2 cores, socket 1 one
    // group of 4; the cost follows the path taken.
    let paths: Vec<Vec<u32>> = (0..10u32)
        .map(|c| if c < 6 { vec![0, c / 2] } else { vec![1, 9] })
        .collect();
    let tree = HierTree::from_paths(&paths).unwrap();
    let mut h = HierAhrw::new(tree, MinQueue::NonZero, Aggregate::Sum);
    let mut seen = [false; 10];
    for &f in &flows {
        let d = h.decide(f);
        let want: usize = h.tree().fanouts_to(d.target).unwrap().iter().sum();
        assert_eq!(d.evaluations as usize, want);
        seen[d.target] = true;
    }
    assert!(seen.iter().all(|&s| s), "every leaf is reachable");
    // H-CAHRW: the home walk plus the adjusted walk, or only the latter.
    let mut ca = HierCaAhrw::new(
        HierTree::uniform(&[2, 2, 4]).unwrap(),
        CostMatrix::uniform(16).unwrap(),
        MinQueue::NonZero,
    )
    .unwrap();
    for &f in &flows[..100] {
        let d = ca.decide(f);
        assert_eq!(d.evaluations, 2 * (2 + 2 + 4));
        assert_eq!(
            ca.decide_from_home(f, d.home).unwrap().evaluations,
            2 + 2 + 4
        );
    }
}

#[test]
fn adding_a_leaf_to_a_group_moves_flows_only_onto_it() {
    // Groups of 4, 4 and 3 leaves; then the third group gets its fourth.
    let paths = |n: u32| -> Vec<Vec<u32>> { (0..n).map(|i| vec![i / 4]).collect() };
    let before = HierAhrw::new(
        HierTree::from_paths(&paths(11)).unwrap(),
        MinQueue::NonZero,
        Aggregate::Sum,
    );
    let after = HierAhrw::new(
        HierTree::from_paths(&paths(12)).unwrap(),
        MinQueue::NonZero,
        Aggregate::Sum,
    );
    let flows = random_digests(100_000, 93);
    let mut moved = 0;
    for &f in &flows {
        let (a, b) = (before.home(f).target, after.home(f).target);
        if a != b {
            assert_eq!(b, 11, "a flow moved between old leaves");
            moved += 1;
        }
    }
    // The new leaf takes a quarter of its group's third.
    let frac = moved as f64 / flows.len() as f64;
    assert!((frac - 1.0 / 12.0).abs() < 0.01, "{frac}");
}

#[test]
fn hierarchical_hrw_balances_and_h_ahrw_is_it_on_equal_queues() {
    let flows = random_digests(200_000, 92);
    let mut h = HierAhrw::new(
        HierTree::uniform(&[4, 2]).unwrap(),
        MinQueue::NonZero,
        Aggregate::Sum,
    );
    let homes: Vec<usize> = flows.iter().map(|&f| h.home(f).target).collect();
    let s = shares(8, homes.iter().copied());
    assert!(max_deviation(&s, &[0.125; 8]) <= 0.01, "{s:?}");
    h.queues_mut().fill(777);
    for (&f, &home) in flows.iter().zip(&homes).take(20_000) {
        assert_eq!(h.decide(f).target, home);
    }
}

// ---------------------------------------------------------------- CA-AHRW

#[test]
fn ca_ahrw_with_unit_costs_is_ahrw_and_costs_keep_flows_home() {
    let flows = random_digests(50_000, 10);
    let q = [8_000u64, 1_000, 2_000, 4_000];
    let mut ahrw = Ahrw::with_targets(4, MinQueue::NonZero).unwrap();
    ahrw.queues_mut().copy_from_slice(&q);
    let mut unit = CaAhrw::new(
        vec![0, 1, 2, 3],
        CostMatrix::uniform(4).unwrap(),
        MinQueue::NonZero,
    )
    .unwrap();
    unit.queues_mut().copy_from_slice(&q);
    let far: Vec<Vec<f64>> = (0..4)
        .map(|t| (0..4).map(|s| if t == s { 1.0 } else { 12.0 }).collect())
        .collect();
    let mut costly = CaAhrw::new(
        vec![0, 1, 2, 3],
        CostMatrix::new(far, 4).unwrap(),
        MinQueue::NonZero,
    )
    .unwrap();
    costly.queues_mut().copy_from_slice(&q);
    let (mut moved_unit, mut moved_costly) = (0, 0);
    for &f in &flows {
        let u = unit.decide(f);
        assert_eq!(u, ahrw.decide(f));
        moved_unit += usize::from(u != unit.home(f));
        moved_costly += usize::from(costly.decide(f) != costly.home(f));
    }
    assert!(moved_unit > 10_000, "{moved_unit}");
    assert!(
        moved_costly < moved_unit / 2,
        "{moved_costly} vs {moved_unit}"
    );
}

// ---------------------------------------------------------------- topology

fn xeon_e5335_sysfs() -> Vec<(u32, String, String)> {
    // 2 packages × 2 L2 × 2 cores: cpu, package id, L2 shared list.
    (0..8u32)
        .map(|c| {
            let l2 = c / 2 * 2;
            (c, format!("{}\n", c / 4), format!("{}-{}\n", l2, l2 + 1))
        })
        .collect()
}

#[test]
fn topology_from_sysfs_text_gives_the_cost_matrix_and_the_tree() {
    let text = xeon_e5335_sysfs();
    let cpus: Vec<SysfsCpu> = text
        .iter()
        .map(|(cpu, pkg, l2)| SysfsCpu {
            cpu: *cpu,
            physical_package_id: pkg,
            caches: vec![
                SysfsCache {
                    level: "1\n",
                    cache_type: "Data\n",
                    shared_cpu_list: ["0\n", "1\n", "2\n", "3\n", "4\n", "5\n", "6\n", "7\n"]
                        [*cpu as usize],
                },
                SysfsCache {
                    level: "1\n",
                    cache_type: "Instruction\n",
                    shared_cpu_list: "garbage is ignored for instruction caches? no: skipped",
                },
                SysfsCache {
                    level: "2\n",
                    cache_type: "Unified\n",
                    shared_cpu_list: l2,
                },
            ],
        })
        .collect();
    let t = Topology::from_sysfs(&cpus).unwrap();
    let c = t.cost_matrix(&CostRatios::default()).unwrap();
    assert_eq!(c.get(0, 0), 1.0);
    assert_eq!(c.get(1, 0), 2.0); // same L2
    assert_eq!(c.get(2, 0), 4.0); // other L2, same socket
    assert_eq!(c.get(4, 0), 12.0); // other socket
    let tree = t.tree().unwrap();
    assert_eq!(tree.targets(), 8);
    assert_eq!(tree.fanouts_to(5).unwrap(), vec![2, 2, 2]);
    let mut h = HierCaAhrw::new(tree, c, MinQueue::NonZero).unwrap();
    let d = h.decide(FlowDigest::of_u64(1));
    assert_eq!(d.target, d.home);
}

#[test]
fn topology_levels_that_split_nothing_cost_nothing() {
    // One package, no shared caches: a flat tree of 4.
    let t = Topology::new(
        (0..4)
            .map(|cpu| CpuPlace {
                cpu,
                package: 0,
                l2: None,
                llc: None,
            })
            .collect(),
    )
    .unwrap();
    assert_eq!(t.tree().unwrap().fanouts_to(2).unwrap(), vec![4]);
    assert_eq!(parse_cpu_list(" 0-1,4,6-7 ").unwrap(), vec![0, 1, 4, 6, 7]);
}

// ---------------------------------------------------------------- H10

/// Runs flows through `targets` FIFOs with AHRW proposals; returns the
/// number of packets that left behind a later packet of their flow.
fn reorders(guarded: bool, seed: u64) -> (u64, u64) {
    let n = 4usize;
    let flows = random_digests(200, seed);
    let cdf = zipf_cdf(flows.len(), 1.0);
    let mut ahrw = Ahrw::with_targets(n, MinQueue::NonZero).unwrap();
    let mut guard = FlowletGuard::new(256).unwrap();
    let mut queues: Vec<VecDeque<(usize, u64)>> = vec![VecDeque::new(); n];
    let mut next_seq = vec![0u64; flows.len()];
    let mut last_out = vec![None::<u64>; flows.len()];
    let mut rng = fastrand::Rng::with_seed(seed + 1);
    let mut bad = 0;
    let mut moves = 0;
    let mut last_target = vec![usize::MAX; flows.len()];
    for _ in 0..100_000 {
        let k = zipf_pick(&cdf, &mut rng);
        let f = flows[k];
        let proposed = ahrw.decide(f);
        let t = if guarded {
            guard.route(f, proposed as u32) as usize
        } else {
            proposed
        };
        if last_target[k] != usize::MAX && last_target[k] != t {
            moves += 1;
        }
        last_target[k] = t;
        queues[t].push_back((k, next_seq[k]));
        next_seq[k] += 1;
        if guarded {
            assert!(guard.sent(f));
        }
        ahrw.queues_mut()[t] += 1500;
        // Targets serve at uneven speeds, so queues differ and AHRW moves flows.
        for (i, q) in queues.iter_mut().enumerate() {
            if rng.f64() < [0.5, 0.3, 0.15, 0.1][i] * 1.1 {
                if let Some((k, seq)) = q.pop_front() {
                    if last_out[k].is_some_and(|l| seq < l) {
                        bad += 1;
                    }
                    last_out[k] = Some(last_out[k].map_or(seq, |l| l.max(seq)));
                    ahrw.queues_mut()[i] -= 1500;
                    if guarded {
                        assert!(guard.completed(flows[k]));
                    }
                }
            }
        }
    }
    if guarded {
        assert_eq!(guard.untracked(), 0);
    }
    (bad, moves)
}

#[test]
fn h10_the_flowlet_guard_never_reorders() {
    let (unguarded, moves) = reorders(false, 100);
    assert!(unguarded > 0, "the workload must reorder without the guard");
    assert!(moves > 0);
    for seed in [100, 200, 300] {
        let (bad, moves) = reorders(true, seed);
        assert_eq!(bad, 0, "seed {seed}: {bad} reordered packets");
        assert!(
            moves > 0,
            "seed {seed}: flows must still move between flowlets"
        );
    }
}

#[test]
fn flowlet_guard_table_matches_a_model_and_overflows_as_documented() {
    let mut g = FlowletGuard::new(64).unwrap();
    let mut model: HashMap<u64, (u32, u32)> = HashMap::new();
    let mut rng = fastrand::Rng::with_seed(11);
    for _ in 0..200_000 {
        // Few distinct keys with colliding low bits stress the probing.
        let key = rng.u64(0..48) << 20;
        let f = FlowDigest(key);
        match rng.u8(0..3) {
            0 => {
                let proposed = rng.u32(0..8);
                let t = g.route(f, proposed);
                let e = model.entry(key).or_insert((proposed, 0));
                if e.1 == 0 {
                    e.0 = proposed;
                }
                assert_eq!(t, e.0);
                assert!(g.sent(f));
                e.1 += 1;
            }
            _ => {
                let had = model.get(&key).map_or(0, |e| e.1);
                assert_eq!(g.completed(f), had > 0);
                if had > 0 {
                    let e = model.get_mut(&key).unwrap();
                    e.1 -= 1;
                    if e.1 == 0 {
                        model.remove(&key);
                    }
                }
            }
        }
        for (&k, &(t, c)) in &model {
            assert_eq!(g.state(FlowDigest(k)), Some((t, c)));
        }
    }
    // Overflow: capacity 2, three flows in flight.
    let mut g = FlowletGuard::new(2).unwrap();
    for k in 0..2 {
        g.route(FlowDigest(k), 1);
        g.sent(FlowDigest(k));
    }
    assert_eq!(g.route(FlowDigest(9), 7), 7);
    assert!(!g.sent(FlowDigest(9)));
    assert_eq!(g.untracked(), 2);
    // A routed-but-never-sent entry can be forgotten.
    let mut g = FlowletGuard::new(1).unwrap();
    g.route(FlowDigest(1), 3);
    assert!(g.forget(FlowDigest(1)));
    assert_eq!(g.tracked(), 0);
}

// ---------------------------------------------------------------- H11

#[test]
fn h11_ps_hrw_recomputes_only_on_drift_arrival_or_departure() {
    let mut ps = PsHrw::new((0..8).collect(), 16, DEFAULT_BETA).unwrap();
    let a = ps.add_tenant(FlowDigest::of_u64(1), 1_000.0).unwrap();
    assert_eq!(ps.recomputations(), 1);
    let b = ps.add_tenant(FlowDigest::of_u64(2), 3_000.0).unwrap();
    assert_eq!(ps.recomputations(), 3, "an arrival recomputes every tenant");
    // Drifts up to 16% of the last computed demand: nothing.
    for d in [1_100.0, 1_160.0, 900.0, 840.0] {
        assert!(!ps.update_demand(a, d).unwrap());
    }
    assert_eq!(ps.recomputations(), 3);
    // Beyond 16%: only that tenant.
    assert!(ps.update_demand(a, 1_200.0).unwrap());
    assert_eq!(ps.recomputations(), 4);
    // The base moved to 1200: 1300 is within 16% of it.
    assert!(!ps.update_demand(a, 1_300.0).unwrap());
    assert_eq!(ps.recomputations(), 4);
    // A departure recomputes the remaining tenant; so do target changes.
    ps.remove_tenant(a).unwrap();
    assert_eq!(ps.recomputations(), 5);
    ps.add_target(8).unwrap();
    assert_eq!(ps.recomputations(), 6);
    ps.remove_target(3).unwrap();
    assert_eq!(ps.recomputations(), 7);
    assert_eq!(
        ps.full_targets(b).unwrap(),
        8,
        "alone, b holds every target"
    );
}

#[test]
fn ps_hrw_shares_follow_the_theorem_7_1_targets() {
    let mut ps = PsHrw::new((0..4).collect(), 4, DEFAULT_BETA).unwrap();
    let big = ps.add_tenant(FlowDigest::of_u64(10), 5_000.0).unwrap();
    let small = ps.add_tenant(FlowDigest::of_u64(11), 3_000.0).unwrap();
    // g(big) = 5/8·4 = 2.5: 2 full targets, residual 0.5 on the other two.
    assert_eq!(ps.full_targets(big).unwrap(), 2);
    let p = ps.probabilities(big).unwrap().to_vec();
    let mut sorted = p.clone();
    sorted.sort_by(f64::total_cmp);
    // N' = 2 + 2·0.5 = 3: p = 1/3, 1/3, 1/6, 1/6.
    for (got, want) in sorted
        .iter()
        .zip([1.0 / 6.0, 1.0 / 6.0, 1.0 / 3.0, 1.0 / 3.0])
    {
        assert!((got - want).abs() < 1e-12, "{p:?}");
    }
    let draws = random_digests(400_000, 12);
    let s = shares(4, draws.iter().map(|&d| ps.route(big, d).unwrap()));
    assert!(max_deviation(&s, &p) <= 0.005, "{s:?} vs {p:?}");
    // The allocated targets are the tenant's top HRW ranks.
    let hrw = Hrw::with_targets(4).unwrap();
    let top = hrw.decide(FlowDigest::of_u64(10));
    assert!((p[top] - 1.0 / 3.0).abs() < 1e-12);
    // g(small) = 1.5.
    assert_eq!(ps.full_targets(small).unwrap(), 1);
}

// ---------------------------------------------------------------- no allocation

#[test]
fn decisions_allocate_nothing() {
    let flows = random_digests(1_000, 13);
    let hrw = Hrw::with_targets(16).unwrap();
    let w = WeightedHrw::with_weights(&[1.0; 16], WeightForm::Logarithmic).unwrap();
    let mut ahrw = Ahrw::with_targets(16, MinQueue::NonZero).unwrap();
    let mut h = HierAhrw::new(
        HierTree::uniform(&[4, 4]).unwrap(),
        MinQueue::NonZero,
        Aggregate::Sum,
    );
    let mut ca = CaAhrw::new(
        (0..16).collect(),
        CostMatrix::uniform(16).unwrap(),
        MinQueue::NonZero,
    )
    .unwrap();
    let mut hca = HierCaAhrw::new(
        HierTree::uniform(&[4, 4]).unwrap(),
        CostMatrix::uniform(16).unwrap(),
        MinQueue::NonZero,
    )
    .unwrap();
    let mut ps = PsHrw::new((0..16).collect(), 4, DEFAULT_BETA).unwrap();
    let t = ps.add_tenant(FlowDigest(1), 10.0).unwrap();
    let mut guard = FlowletGuard::new(2048).unwrap();
    let counts = allocation_counter::measure(|| {
        let mut sum = 0usize;
        for (i, &f) in flows.iter().enumerate() {
            ahrw.queues_mut()[i % 16] += 1500;
            h.queues_mut()[i % 16] += 1500;
            ca.queues_mut()[i % 16] += 1500;
            hca.queues_mut()[i % 16] += 1500;
            sum += hrw.decide(f) + w.decide(f) + ahrw.decide(f) + h.decide(f).target;
            sum += ca.decide(f) + hca.decide(f).target + ps.route(t, f).unwrap();
            sum += guard.route(f, (i % 16) as u32) as usize;
            guard.sent(f);
            if ps.update_demand(t, 10.0 + (i % 3) as f64).unwrap() {
                sum += 1;
            }
        }
        std::hint::black_box(sum);
    });
    assert_eq!(counts.count_total, 0);
}

// ---------------------------------------------------------------- errors

#[test]
fn bad_input_is_a_typed_error() {
    assert_eq!(Hrw::with_targets(0).unwrap_err(), PlaceError::NoTargets);
    assert_eq!(Hrw::new(vec![]).unwrap_err(), PlaceError::NoTargets);
    assert_eq!(
        Hrw::new(vec![1, 2, 1]).unwrap_err(),
        PlaceError::DuplicateTarget { id: 1 }
    );
    for (bad, idx) in [(0.0, 1), (-1.0, 1), (f64::NAN, 1), (f64::INFINITY, 1)] {
        let e = WeightedHrw::with_weights(&[1.0, bad], WeightForm::Logarithmic).unwrap_err();
        assert!(
            matches!(e, PlaceError::BadWeight { index, .. } if index == idx),
            "{e}"
        );
    }
    assert_eq!(
        WeightedHrw::with_weights(&[], WeightForm::Carp).unwrap_err(),
        PlaceError::NoTargets
    );
    assert!(WeightedHrw::with_weights(&[f64::MAX, f64::MAX], WeightForm::Carp).is_err());
    assert!(matches!(
        CostMatrix::new(vec![vec![1.0, 2.0]], 2),
        Err(PlaceError::CostMatrixSize {
            expected: 2,
            rows: 1,
            ..
        })
    ));
    assert!(matches!(
        CostMatrix::new(vec![vec![1.0, 2.0], vec![1.0]], 2),
        Err(PlaceError::CostMatrixSize { cols: 1, .. })
    ));
    assert!(matches!(
        CostMatrix::new(vec![vec![1.0, 0.9], vec![1.0, 1.0]], 2),
        Err(PlaceError::CostBelowOne { row: 0, col: 1, .. })
    ));
    assert!(matches!(
        CostMatrix::new(vec![vec![1.0, f64::NAN], vec![1.0, 1.0]], 2),
        Err(PlaceError::CostBelowOne { .. })
    ));
    assert!(matches!(
        CaAhrw::new(
            vec![0, 1, 2],
            CostMatrix::uniform(2).unwrap(),
            MinQueue::NonZero
        ),
        Err(PlaceError::CostMatrixSize { expected: 3, .. })
    ));
    assert!(HierCaAhrw::new(
        HierTree::uniform(&[2, 2]).unwrap(),
        CostMatrix::uniform(3).unwrap(),
        MinQueue::NonZero
    )
    .is_err());
    let ratios = CostRatios {
        shared_l2: 0.5,
        ..CostRatios::default()
    };
    let t = Topology::new(vec![
        CpuPlace {
            cpu: 0,
            package: 0,
            l2: Some(0),
            llc: None,
        },
        CpuPlace {
            cpu: 1,
            package: 0,
            l2: Some(0),
            llc: None,
        },
    ])
    .unwrap();
    assert!(matches!(
        t.cost_matrix(&ratios),
        Err(PlaceError::OutOfRange {
            what: "shared_l2",
            ..
        })
    ));
    // Topologies that do not parse.
    for list in ["", "a", "3-1", "1,,2", "0-99999999"] {
        assert!(
            matches!(parse_cpu_list(list), Err(PlaceError::Topology { .. })),
            "{list:?}"
        );
    }
    let cpu = |pkg: &'static str, level: &'static str, ty: &'static str, list: &'static str| {
        vec![SysfsCpu {
            cpu: 0,
            physical_package_id: pkg,
            caches: vec![SysfsCache {
                level,
                cache_type: ty,
                shared_cpu_list: list,
            }],
        }]
    };
    for bad in [
        cpu("x", "2", "Unified", "0"),
        cpu("0", "two", "Unified", "0"),
        cpu("0", "2", "Weird", "0"),
        cpu("0", "2", "Unified", "1-3"), // omits cpu 0
    ] {
        let e = Topology::from_sysfs(&bad).unwrap_err();
        assert!(matches!(e, PlaceError::Topology { .. }), "{e}");
        assert!(e.to_string().contains("cpu0"), "{e}");
    }
    assert!(Topology::from_sysfs(&cpu("-1", "2", "Unified", "0")).is_ok());
    assert!(Topology::new(vec![]).is_err());
    assert!(Topology::new(vec![
        CpuPlace {
            cpu: 0,
            package: 0,
            l2: None,
            llc: None
        };
        2
    ])
    .is_err());
    // Trees.
    assert_eq!(HierTree::uniform(&[]).unwrap_err(), PlaceError::NoTargets);
    assert_eq!(
        HierTree::uniform(&[2, 0]).unwrap_err(),
        PlaceError::NoTargets
    );
    assert!(matches!(
        HierTree::from_paths(&[vec![0], vec![0, 1]]),
        Err(PlaceError::Tree(_))
    ));
    // PS-HRW.
    assert!(PsHrw::new(vec![0], 0, 0.16).is_err());
    assert!(PsHrw::new(vec![0], 1, -0.1).is_err());
    assert!(PsHrw::new(vec![0], 1, f64::NAN).is_err());
    let mut ps = PsHrw::new(vec![0, 1], 1, 0.16).unwrap();
    assert!(matches!(
        ps.add_tenant(FlowDigest(1), 0.0),
        Err(PlaceError::BadWeight { .. })
    ));
    let t = ps.add_tenant(FlowDigest(1), 5.0).unwrap();
    assert!(matches!(
        ps.add_tenant(FlowDigest(2), 5.0),
        Err(PlaceError::Full { .. })
    ));
    assert!(ps.update_demand(t, f64::INFINITY).is_err());
    assert!(ps.add_target(1).is_err());
    assert!(ps.remove_target(7).is_err());
    ps.remove_tenant(t).unwrap();
    assert!(ps.route(t, FlowDigest(3)).is_err());
    assert!(carp_multipliers(&[0.0, 0.0]).is_err());
    assert!(carp_multipliers(&[0.5, -0.5]).is_err());
    assert_eq!(
        carp_multipliers(&[1e308, 1e308]).unwrap_err().to_string(),
        "the weights sum to inf: their sum must be finite"
    );
    // Others.
    assert!(FlowletGuard::new(0).is_err());
    let mut a = Ahrw::with_targets(2, MinQueue::NonZero).unwrap();
    assert!(matches!(
        a.set_queue(2, 1),
        Err(PlaceError::IndexOutOfRange {
            index: 2,
            len: 2,
            ..
        })
    ));
    // Messages name the item and the value.
    assert_eq!(
        PlaceError::BadWeight {
            index: 2,
            value: -1.0
        }
        .to_string(),
        "weight 2 = -1 is invalid: weights must be finite and > 0"
    );
}

#[test]
fn the_weight_function_is_the_published_one() {
    // g(c, S) = (A·((A·S + B) XOR D) + B) mod 2^31 with D the digest's top 31 bits.
    let d = FlowDigest(0xFFFF_FFFF_0000_0000);
    let s = (1_103_515_245u64 * 7 + 12_345) % (1 << 31);
    let want = (1_103_515_245u64 * (s ^ (d.0 >> 33)) + 12_345) % (1 << 31);
    assert_eq!(weight(d, 7), want);
}
