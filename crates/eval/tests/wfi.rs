//! Service-guarantee measurements: the fluid reference on hand-computed
//! cases, the PSPAT paper's §5.2 example as a regression (issue "Fair
//! queueing with provable guarantees"), FIFO failing every bound on an
//! adversarial case, and the input checks of the WFI and harness tools.

use pspat_eval::fluid::{fluid_finish_times, ticks_to_ns, Arrival};
use pspat_eval::harness::Flowsets;
use pspat_eval::wfi::{self, twfi_bound, Scenario, Workload, WorkloadParams};
use pspat_sched::{AlgKind, ConfigError};

const B8: u64 = 8_000_000_000; // one byte per ns

fn fluid_ns(arr: &[Arrival], w: &[u32], rate: u64) -> Vec<f64> {
    fluid_finish_times(arr, w, rate)
        .unwrap()
        .iter()
        .map(|&t| ticks_to_ns(t, rate))
        .collect()
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-6
}

#[test]
fn fluid_two_flows_hand_computed() {
    // Flow 0 (w 1): 300 B + 300 B at 0. Flow 1 (w 2): 600 B at 300 ns.
    // 0..300: flow 0 alone, first packet done at 300. Then rates 1/3 and
    // 2/3: flow 0's 300 B and flow 1's 600 B both take 900 ns -> 1200.
    let arr = [
        Arrival::new(0, 0, 300),
        Arrival::new(0, 0, 300),
        Arrival::new(300, 1, 600),
    ];
    let f = fluid_ns(&arr, &[1, 2], B8);
    assert!(
        close(f[0], 300.0) && close(f[1], 1200.0) && close(f[2], 1200.0),
        "{f:?}"
    );
}

#[test]
fn fluid_weights_change_the_split_and_idle_gaps_reset() {
    // 10 Gbit/s: 1500 B = 1200 ns. Weights 1 and 4, one packet each at 0:
    // flow 1 at 4/5 of the link finishes at 1500 ns, flow 0 then alone:
    // 1500 ns · 1/5 = 300 ns worth done, 900 ns left -> 2400 ns.
    // A packet of flow 0 at 10 µs finds the system empty: 10 000 + 1200.
    let rate = 10_000_000_000;
    let arr = [
        Arrival::new(0, 0, 1500),
        Arrival::new(0, 1, 1500),
        Arrival::new(10_000, 0, 1500),
    ];
    let f = fluid_ns(&arr, &[1, 4], rate);
    assert!(
        close(f[1], 1500.0) && close(f[0], 2400.0) && close(f[2], 11_200.0),
        "{f:?}"
    );
}

fn paper(flows: u32) -> Scenario {
    Scenario::generate(&Workload::Paper { flows }, &WorkloadParams::default()).unwrap()
}

#[test]
fn paper_scenario_drr_bounds_and_measurements() {
    for (flows, bound_ns) in [(25u32, 271_200.0), (100, 361_200.0)] {
        let s = paper(flows);
        assert_eq!(s.rate_bps, 10_000_000_000);
        assert_eq!(s.weights.iter().sum::<u32>(), 200);
        let run = wfi::run(AlgKind::Drr, &s).unwrap();
        let r = &run.report;
        let heavy = &r.per_flow[0];
        assert_eq!(heavy.phi, 0.5);
        assert_eq!(
            heavy.bound_twfi_ns,
            Some(bound_ns),
            "DRR bound at N = {flows}"
        );
        let measured = heavy.max_twfi_ns.expect("flow 0 sent packets");
        println!(
            "drr N={flows}: flow 0 T-WFI {measured:.1} ns (bound {bound_ns}), lag {:?} ns, B-WFI {:.0} B",
            heavy.max_lag_ns, heavy.max_bwfi_bytes
        );
        assert!(measured < bound_ns, "N = {flows}: {measured} >= {bound_ns}");
        assert_eq!(heavy.within_bound, Some(true));
        assert!(r.all_within_bound, "{r:#?}");
        // DRR makes the heavy flow wait for the others' quanta (~100·L/B).
        assert!(
            measured > 50_000.0,
            "DRR should show its O(N) lag: {measured}"
        );
        assert_eq!(r.packets as usize, s.arrivals.len());
    }
}

#[test]
fn paper_scenario_fair_queueing_algorithms() {
    // Bounds for flow 0 (φ = 0.5, L_k = L = 1500 B, L/B = 1.2 µs).
    let expected = [("qfq", 14_400.0), ("qfq+", 30_000.0), ("wf2q+", 3_600.0)];
    for (name, bound_ns) in expected {
        let alg = AlgKind::parse(name).expect("every fair-queueing algorithm is registered");
        for flows in [25u32, 100] {
            let run = wfi::run(alg, &paper(flows)).unwrap();
            let heavy = &run.report.per_flow[0];
            let measured = heavy.max_twfi_ns.expect("flow 0 sent packets");
            println!("{name} N={flows}: flow 0 T-WFI {measured:.1} ns (bound {bound_ns})");
            assert_eq!(heavy.bound_twfi_ns, Some(bound_ns));
            assert!(
                measured <= bound_ns,
                "{name} N = {flows}: {measured} > {bound_ns}"
            );
            assert!(run.report.all_within_bound, "{:#?}", run.report);
        }
    }
}

/// Three greedy weight-1 flows dump 100 packets each at t = 0; a weight-100
/// flow sends one packet at t = 1 ns.
fn adversarial() -> Scenario {
    let mut arrivals = Vec::new();
    for i in 0..100 {
        for f in 1..=3 {
            let _ = i;
            arrivals.push(Arrival::new(0, f, 1500));
        }
    }
    arrivals.push(Arrival::new(1, 0, 1500));
    Scenario {
        workload: "adversarial",
        weights: vec![100, 1, 1, 1],
        lmax: vec![1500; 4],
        rate_bps: 10_000_000_000,
        arrivals,
    }
}

#[test]
fn fifo_exceeds_every_bound_on_an_adversarial_case() {
    let s = adversarial();
    let fifo = wfi::run(AlgKind::Fifo, &s).unwrap();
    let victim = &fifo.report.per_flow[0];
    assert_eq!(victim.bound_twfi_ns, None, "FIFO has no bound");
    assert_eq!(victim.within_bound, None);
    assert!(fifo.report.all_within_bound, "no flow has a bound to fail");
    let measured = victim.max_twfi_ns.unwrap();
    // It waits for all 300 packets: ~300 · 1.2 µs.
    assert!(measured > 300.0 * 1200.0 - 2.0 * 1200.0, "{measured}");
    for alg in ["qfq", "drr", "wf2q+"] {
        let bound = twfi_bound(alg, 0, &s.weights, &s.lmax)
            .unwrap()
            .ns(s.rate_bps);
        assert!(measured > bound, "FIFO {measured} vs {alg} {bound}");
    }
    // B-WFI: while the victim waited, φ·W = 100/103 of 300 packets went by.
    assert!(
        victim.max_bwfi_bytes > 0.9 * 300.0 * 1500.0,
        "{}",
        victim.max_bwfi_bytes
    );
    // DRR on the same arrivals keeps its bound (the victim goes after at
    // most one quantum of each flow).
    let drr = wfi::run(AlgKind::Drr, &s).unwrap();
    assert!(drr.report.all_within_bound, "{:#?}", drr.report);
    assert!(drr.report.per_flow[0].max_twfi_ns.unwrap() < 5.0 * 1200.0);
}

#[test]
fn every_workload_runs_and_the_trace_is_consistent() {
    let params = WorkloadParams {
        duration_ns: 2_000_000,
        seed: 7,
        ..WorkloadParams::default()
    };
    let workloads = [
        Workload::Greedy {
            weights: vec![1, 2, 3, 10],
        },
        Workload::OnOff {
            weights: vec![1, 1, 4, 8, 16],
        },
        Workload::Victim {
            weights: vec![50, 1, 1, 1, 1, 1],
        },
    ];
    for w in &workloads {
        let s = Scenario::generate(w, &params).unwrap();
        assert_eq!(s, Scenario::generate(w, &params).unwrap(), "deterministic");
        for alg in [AlgKind::Fifo, AlgKind::Drr] {
            let run = wfi::run(alg, &s).unwrap();
            let tx = 1200.0; // 1500 B at 10 Gbit/s
            let mut rows = run.trace.clone();
            for r in &rows {
                assert!(r.departure_ns >= r.arrival_ns as f64 + tx - 1e-9);
                assert!(r.fluid_finish_ns >= r.arrival_ns as f64 + tx - 1e-6);
            }
            // One packet at a time on the link.
            rows.sort_by(|a, b| a.departure_ns.total_cmp(&b.departure_ns));
            for pair in rows.windows(2) {
                assert!(pair[1].departure_ns - pair[0].departure_ns >= tx - 1e-9);
            }
            if alg == AlgKind::Drr {
                assert!(
                    run.report.all_within_bound,
                    "{} {:#?}",
                    w.name(),
                    run.report
                );
            }
            for f in &run.report.per_flow {
                assert!(f.max_bwfi_bytes >= 0.0);
            }
        }
    }
}

#[test]
fn zero_or_missing_weights_are_rejected() {
    let p = WorkloadParams::default();
    let err = Scenario::generate(&Workload::Greedy { weights: vec![] }, &p).unwrap_err();
    assert!(err.to_string().contains("weights"), "{err}");
    let err = Scenario::generate(
        &Workload::OnOff {
            weights: vec![0, 0],
        },
        &p,
    )
    .unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("weight of flow 0") && msg.contains("1..=65536"),
        "{msg}"
    );
    assert!(Scenario::generate(
        &Workload::Victim {
            weights: vec![70_000]
        },
        &p
    )
    .is_err());
    assert!(fluid_finish_times(&[Arrival::new(0, 0, 1)], &[0, 0], B8).is_err());
    let bad_len = WorkloadParams { pkt_len: 0, ..p };
    let msg = Scenario::generate(&Workload::Greedy { weights: vec![1] }, &bad_len)
        .unwrap_err()
        .to_string();
    assert!(
        msg.contains("packet length") && msg.contains("1..=65535"),
        "{msg}"
    );
    assert!(Workload::from_name("paper", 30, vec![]).is_err());
    assert!(Workload::from_name("nope", 3, vec![1]).is_err());
}

#[test]
fn flowset_parser_errors_name_the_item_and_range() {
    let cases: [(&str, &[&str]); 9] = [
        ("", &["flowsets", "empty"]),
        ("1::4,,2::4", &["empty item"]),
        ("1:4", &["1:4", "3 fields"]),
        ("1:2:3:4:5", &["ambiguous"]),
        ("0::4", &["weight", "1..=65536"]),
        ("65537::4", &["weight", "1..=65536"]),
        ("1:70000:4", &["len", "1..=65535"]),
        ("1::0", &["flows", "1..="]),
        ("1::4x", &["unknown suffix"]),
    ];
    for (spec, needles) in cases {
        let err: ConfigError = Flowsets::parse(spec).unwrap_err();
        let msg = err.to_string();
        for n in needles {
            assert!(msg.contains(n), "{spec:?}: {msg:?} lacks {n:?}");
        }
    }
    assert!(Flowsets::parse("a::1").is_err());
    assert!(Flowsets::parse("4-2-2::1").is_err(), "decreasing range");
    assert!(
        Flowsets::parse("1::16m,1::1").is_err(),
        "more than 2^24 flows"
    );
}

/// `wfi::run` gives WF²Q+ the link rate, so every flow of every workload
/// stays within the one-maximum-packet bound L_k/(φ_k·B) + L/B, with 64 KB
/// packets too (where the scheduler without the hint exceeds it).
#[test]
fn wf2q_plus_within_its_one_packet_bound_on_every_workload() {
    for (pkt_len, rate_bps) in [(1500u32, 10_000_000_000u64), (65_535, 8_000_000_000)] {
        let params = WorkloadParams {
            duration_ns: 4_000_000,
            seed: 11,
            pkt_len,
            rate_bps,
            ..WorkloadParams::default()
        };
        for w in [
            Workload::Greedy {
                weights: vec![1, 2, 3, 10, 65_536],
            },
            Workload::OnOff {
                weights: vec![1, 1, 4, 8, 16, 1000],
            },
            Workload::Victim {
                weights: vec![50, 1, 1, 1, 1, 1],
            },
        ] {
            let s = Scenario::generate(&w, &params).unwrap();
            let run = wfi::run(AlgKind::Wf2qPlus, &s).unwrap();
            assert!(
                run.report.all_within_bound,
                "{} len {pkt_len}: {:#?}",
                w.name(),
                run.report
            );
        }
    }
    let run = wfi::run(AlgKind::Wf2qPlus, &adversarial()).unwrap();
    assert!(run.report.all_within_bound, "{:#?}", run.report);
}

/// Mixed lengths up to 64 KB, extreme weights, bursts and silences (the
/// workload of `fair.rs`'s lag tests) on a 10 Gbit/s link.
fn mixed_jumbo(seed: u64) -> Scenario {
    let mut rng = fastrand::Rng::with_seed(seed);
    let n = rng.usize(2..24);
    let weights: Vec<u32> = (0..n)
        .map(|_| match rng.u8(0..4) {
            0 => 1,
            1 => 65_536,
            _ => {
                let bits = rng.u32(0..=16);
                rng.u32(1..=1 << bits)
            }
        })
        .collect();
    let lmax: Vec<u32> = (0..n)
        .map(|_| match rng.u8(0..3) {
            0 => 65_535,
            1 => 1500,
            _ => rng.u32(64..=65_535),
        })
        .collect();
    let rate_bps = 10_000_000_000;
    let mut arrivals = Vec::new();
    let mut t = 0u64;
    while arrivals.len() < 3000 {
        let f = rng.usize(0..n);
        let mut bytes = 0u64;
        for _ in 0..rng.usize(1..8) {
            let len = if rng.bool() {
                lmax[f]
            } else {
                rng.u32(64.min(lmax[f])..=lmax[f])
            };
            arrivals.push(Arrival::new(t, f as u32, len));
            bytes += u64::from(len);
        }
        // bytes·0.8 ns at 10 Gbit/s, offered load about 1.
        t += (bytes as f64 * 0.8 * (0.2 + 1.6 * rng.f64())) as u64;
    }
    Scenario {
        workload: "mixed-jumbo",
        weights,
        lmax,
        rate_bps,
        arrivals,
    }
}

/// With the link rate (as `wfi::run` sets it), WF²Q+ stays within
/// L_k/(φ_k·B) + L/B on mixed 64 KB workloads; reports how often the
/// scheduler without the hint exceeds it on the same arrivals.
#[test]
fn wf2q_plus_hint_keeps_the_one_packet_bound_with_mixed_jumbo_packets() {
    let mut unhinted_over = 0;
    for seed in 0..12 {
        let s = mixed_jumbo(seed);
        let run = wfi::run(AlgKind::Wf2qPlus, &s).unwrap();
        assert!(
            run.report.all_within_bound,
            "seed {seed}: {:#?}",
            run.report
        );
        let mut unhinted = wfi::scheduler_config(AlgKind::Wf2qPlus, &s);
        unhinted.link_rate_bps = None;
        let mut plain = unhinted.build(s.flow_table().unwrap()).unwrap();
        let r = wfi::simulate(&mut plain, &s).unwrap();
        if !r.report.all_within_bound {
            unhinted_over += 1;
        }
    }
    println!("wf2q+ without the link rate exceeds L_k/(φ_k·B) + L/B in {unhinted_over} of 12 runs");
    // The workload tells the two apart (2 of 12 runs when written); if a
    // change makes the unhinted scheduler meet the bound too, update its
    // module docs and drop this line.
    assert!(
        unhinted_over > 0,
        "the workload no longer exercises the hint"
    );
}

/// DRR keeps its T-WFI bound (1/φ_min + 1/φ_k + N − 1)·L/B whatever the
/// weights (issue 17 finding 12): with every weight large, quanta of
/// `weight × unit` bytes made the smallest quantum 1024 times the 64-byte
/// packet and the measured T-WFI was 9.7 µs against a 2.6 µs bound; quanta
/// of ⌈L·w/w_min⌉ keep the smallest one at L.
#[test]
fn drr_keeps_its_bound_with_heavy_weights() {
    let cases: [(&[u32], u32); 4] = [
        (&[65_536, 65_536], 64),
        (&[65_536, 30_000, 65_536, 1_000], 64),
        (&[40_000, 65_536, 50_000], 1500),
        (&[65_535, 1, 65_536], 200),
    ];
    for (weights, pkt_len) in cases {
        let params = WorkloadParams {
            rate_bps: 1_000_000_000,
            pkt_len,
            max_packets: Some(2000),
            ..WorkloadParams::default()
        };
        let s = Scenario::generate(
            &Workload::Greedy {
                weights: weights.to_vec(),
            },
            &params,
        )
        .unwrap();
        let run = wfi::run(AlgKind::Drr, &s).unwrap();
        for (k, f) in run.report.per_flow.iter().enumerate() {
            let bound = twfi_bound("drr", k, &s.weights, &s.lmax)
                .unwrap()
                .ns(s.rate_bps);
            let measured = f.max_twfi_ns.expect("every greedy flow sends");
            println!("drr weights {weights:?} len {pkt_len}: flow {k} T-WFI {measured:.1} ns (bound {bound:.1})");
            assert!(
                measured <= bound,
                "weights {weights:?} len {pkt_len}: flow {k} T-WFI {measured} ns > bound {bound} ns"
            );
        }
        assert!(run.report.all_within_bound, "{:#?}", run.report);
    }
}
