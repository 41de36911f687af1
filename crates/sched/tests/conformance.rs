//! The conformance suite, stamped out for every algorithm.
//!
//! Every algorithm must keep (ARCHITECTURE.md §4): conservation (each
//! accepted packet leaves exactly once, or is purged once when its flow is
//! removed; each refused one comes back), FIFO order within a flow, and,
//! unless it shapes, work conservation (`dequeue` answers whenever packets
//! are held), also while flows are added, changed and removed. Fair algorithms must also
//! give permanently backlogged flows shares proportional to their weights.
//!
//! Adding an algorithm is one line in `each_alg!` (and in `each_fair_alg!`).

use std::collections::HashSet;

use pspat_sched::{
    AlgKind, AnyScheduler, DropReason, FlowId, FlowParams, FlowTable, Instant, Packet, Scheduler,
    SchedulerConfig, VisitScheduler,
};

/// Seeds for the randomised workloads; printed on failure.
const SEEDS: [u64; 4] = [1, 7, 42, 0xDEAD_BEEF];

fn build(alg: AlgKind, flows: &[FlowParams], capacity: usize) -> AnyScheduler {
    let mut cfg = SchedulerConfig::new(alg);
    cfg.capacity = capacity;
    cfg.build(FlowTable::new(flows.to_vec()).expect("valid flows"))
        .expect("valid config")
}

fn random_flows(rng: &mut fastrand::Rng, n: usize) -> Vec<FlowParams> {
    (0..n)
        .map(|_| FlowParams {
            weight: rng.u32(1..=64),
            lmax: 1500,
            priority: rng.u8(0..8),
        })
        .collect()
}

/// Drives a random mix of enqueues and dequeues, then drains; returns the
/// departures in order. Checks conservation and per-flow order on the way.
fn run_random(alg: AlgKind, seed: u64, work_conserving: bool) {
    let mut rng = fastrand::Rng::with_seed(seed);
    let nflows = rng.usize(1..40);
    let flows = random_flows(&mut rng, nflows);
    let capacity = 256;
    let mut s = build(alg, &flows, capacity);
    let mut accepted = HashSet::new();
    let mut refused = 0u64;
    let mut departed = Vec::new();
    let mut now = 0u64;
    let mut next_token = 0u64;
    for _ in 0..20_000 {
        now += rng.u64(0..100);
        if rng.u8(0..10) < 6 {
            // Bursts: several packets of one flow at once.
            let flow = rng.u32(0..nflows as u32);
            for _ in 0..rng.usize(1..8) {
                let pkt = Packet::new(FlowId(flow), rng.u32(64..=1500), next_token);
                next_token += 1;
                match s.enqueue(Instant::from_nanos(now), pkt) {
                    Ok(()) => {
                        accepted.insert(pkt.token);
                    }
                    Err(rej) => {
                        assert_eq!(
                            rej.packet, pkt,
                            "seed {seed}: rejection must hand the packet back"
                        );
                        refused += 1;
                    }
                }
            }
        } else {
            let held = s.queued();
            match s.dequeue(Instant::from_nanos(now)) {
                Some(p) => departed.push(p),
                None => assert!(
                    !work_conserving || held == 0,
                    "seed {seed}: {alg} idled with {held} packets held"
                ),
            }
        }
        assert_eq!(
            s.queued(),
            accepted.len() - departed.len(),
            "seed {seed}: queued() out of step"
        );
    }
    // Drain; a shaper gets time to release everything.
    let mut guard = 0;
    while s.queued() > 0 {
        let t = s
            .next_eligible(Instant::from_nanos(now))
            .map_or(now, |t| t.as_nanos().max(now));
        now = t;
        while let Some(p) = s.dequeue(Instant::from_nanos(now)) {
            departed.push(p);
        }
        now += 1_000;
        guard += 1;
        assert!(guard < 10_000_000, "seed {seed}: {alg} never drained");
    }
    assert!(s.dequeue(Instant::from_nanos(now)).is_none());

    // Conservation: every accepted packet once, nothing invented.
    let mut seen = HashSet::new();
    for p in &departed {
        assert!(
            seen.insert(p.token),
            "seed {seed}: token {} left twice",
            p.token
        );
        assert!(
            accepted.contains(&p.token),
            "seed {seed}: token {} was never accepted",
            p.token
        );
    }
    assert_eq!(seen.len(), accepted.len(), "seed {seed}: packets lost");
    assert_eq!(
        accepted.len() as u64 + refused,
        next_token,
        "seed {seed}: accounting"
    );

    // FIFO within a flow: tokens grow per flow.
    let mut last = vec![None::<u64>; nflows];
    for p in &departed {
        let l = &mut last[p.flow.index()];
        assert!(
            l.is_none_or(|t| t < p.token),
            "seed {seed}: flow {} reordered",
            p.flow.0
        );
        *l = Some(p.token);
    }
}

/// As [`run_random`] with flows added, changed and removed on the way
/// while other flows hold packets: each accepted packet leaves once or is
/// purged once (with `FlowRemoved`, only when its flow is removed), and
/// per-flow order holds within each life of a flow id.
fn run_lifecycle(alg: AlgKind, seed: u64, work_conserving: bool) {
    let mut rng = fastrand::Rng::with_seed(seed ^ 0x11FE);
    let slots = rng.usize(2..40);
    let n_initial = rng.usize(1..=slots);
    let initial = random_flows(&mut rng, n_initial);
    let mut cfg = SchedulerConfig::new(alg);
    cfg.capacity = 256;
    let table = FlowTable::with_capacity(slots, initial.clone()).expect("valid table");
    let mut s = cfg.build(table).expect("valid config");
    let mut lmax: Vec<Option<u32>> = (0..slots).map(|i| initial.get(i).map(|f| f.lmax)).collect();
    // Per flow slot: the tokens held, oldest first.
    let mut held: Vec<std::collections::VecDeque<u64>> = vec![Default::default(); slots];
    let (mut accepted, mut departed, mut purged) = (0u64, 0u64, 0u64);
    let mut now = 0u64;
    let mut token = 0u64;
    let idle_check = |s: &AnyScheduler, held: usize| {
        assert!(
            !work_conserving || held == 0,
            "seed {seed}: {alg} idled with {held} packets held ({} queued)",
            s.queued()
        );
    };
    for _ in 0..20_000 {
        now += rng.u64(0..100);
        let f = rng.usize(0..slots);
        let flow = FlowId(f as u32);
        match rng.u8(0..100) {
            0..=54 => {
                for _ in 0..rng.usize(1..8) {
                    let len = rng.u32(64..=lmax[f].unwrap_or(1500));
                    let pkt = Packet::new(flow, len, token);
                    token += 1;
                    match s.enqueue(Instant::from_nanos(now), pkt) {
                        Ok(()) => {
                            assert!(lmax[f].is_some(), "seed {seed}: absent flow accepted");
                            held[f].push_back(pkt.token);
                            accepted += 1;
                        }
                        Err(rej) => {
                            assert_eq!(rej.packet, pkt, "seed {seed}: rejection must hand it back");
                            if lmax[f].is_none() {
                                assert_eq!(rej.reason, DropReason::UnknownFlow);
                            }
                        }
                    }
                }
            }
            55..=93 => {
                let before = s.queued();
                match s.dequeue(Instant::from_nanos(now)) {
                    Some(p) => {
                        let head = held[p.flow.index()].pop_front();
                        assert_eq!(
                            head,
                            Some(p.token),
                            "seed {seed}: {alg} flow {} reordered",
                            p.flow.0
                        );
                        departed += 1;
                    }
                    None => idle_check(&s, before),
                }
            }
            94..=95 => {
                let params = random_flows(&mut rng, 1)[0];
                let r = s.add_flow(flow, params);
                assert_eq!(r.is_ok(), lmax[f].is_none(), "seed {seed}: {alg} add {r:?}");
                if r.is_ok() {
                    lmax[f] = Some(params.lmax);
                }
            }
            96..=97 => {
                let params = FlowParams {
                    lmax: rng.u32(64..=1500),
                    ..random_flows(&mut rng, 1)[0]
                };
                let r = s.change_flow(flow, params);
                assert_eq!(
                    r.is_ok(),
                    lmax[f].is_some(),
                    "seed {seed}: {alg} change {r:?}"
                );
                if r.is_ok() {
                    lmax[f] = Some(params.lmax);
                }
            }
            _ => {
                let mut out = Vec::new();
                let r = s.remove_flow(flow, &mut |rej| out.push(rej));
                assert_eq!(
                    r.is_ok(),
                    lmax[f].is_some(),
                    "seed {seed}: {alg} remove {r:?}"
                );
                let want: Vec<u64> = held[f].drain(..).collect();
                let got: Vec<u64> = out.iter().map(|r| r.packet.token).collect();
                assert_eq!(got, want, "seed {seed}: {alg} purged the wrong packets");
                assert!(out.iter().all(|r| r.reason == DropReason::FlowRemoved));
                purged += out.len() as u64;
                lmax[f] = None;
            }
        }
        assert_eq!(
            s.queued() as u64,
            accepted - departed - purged,
            "seed {seed}: {alg} queued() out of step"
        );
    }
    let mut guard = 0;
    while s.queued() > 0 {
        now = s
            .next_eligible(Instant::from_nanos(now))
            .map_or(now, |t| t.as_nanos().max(now));
        while let Some(p) = s.dequeue(Instant::from_nanos(now)) {
            assert_eq!(
                held[p.flow.index()].pop_front(),
                Some(p.token),
                "seed {seed}: drain order"
            );
            departed += 1;
        }
        now += 1_000;
        guard += 1;
        assert!(guard < 10_000_000, "seed {seed}: {alg} never drained");
    }
    assert_eq!(
        accepted,
        departed + purged,
        "seed {seed}: {alg} lost packets"
    );
    assert!(held.iter().all(|q| q.is_empty()));
}

/// Bad packets come back with a reason instead of panicking.
fn rejects_bad_packets(alg: AlgKind) {
    let mut s = build(alg, &[FlowParams::default(); 2], 4);
    let now = Instant::ZERO;
    assert!(
        s.enqueue(now, Packet::new(FlowId(2), 60, 0)).is_err(),
        "unknown flow"
    );
    assert!(
        s.enqueue(now, Packet::new(FlowId(0), 0, 1)).is_err(),
        "zero length"
    );
    assert!(
        s.enqueue(now, Packet::new(FlowId(0), 70_000, 2)).is_err(),
        "too long"
    );
    let mut kept = 0;
    for i in 0..10 {
        if s.enqueue(now, Packet::new(FlowId(0), 60, 10 + i)).is_ok() {
            kept += 1;
        }
    }
    assert!(kept <= 4, "capacity 4 must bound what is held");
    assert_eq!(s.queued(), kept);
}

/// Permanently backlogged flows: the service of each stays within
/// `tolerance(weight)` bytes of its weighted share of the total.
fn shares_follow_weights(alg: AlgKind, tolerance: impl Fn(u64) -> f64) {
    for seed in SEEDS {
        let mut rng = fastrand::Rng::with_seed(seed);
        let n = rng.usize(2..30);
        let flows: Vec<FlowParams> = (0..n)
            .map(|_| FlowParams::weighted(rng.u32(1..=16)))
            .collect();
        let wsum: u64 = flows.iter().map(|f| u64::from(f.weight)).sum();
        let mut s = build(alg, &flows, 64 * n);
        let mut token = 0;
        let mut fill = |s: &mut AnyScheduler, f: usize, rng: &mut fastrand::Rng| {
            let pkt = Packet::new(FlowId(f as u32), rng.u32(64..=1500), token);
            token += 1;
            s.enqueue(Instant::ZERO, pkt).expect("room");
        };
        for f in 0..n {
            for _ in 0..8 {
                fill(&mut s, f, &mut rng);
            }
        }
        let mut served = vec![0u64; n];
        let mut total = 0u64;
        for _ in 0..200_000 {
            let p = s.dequeue(Instant::ZERO).expect("backlogged");
            served[p.flow.index()] += u64::from(p.len);
            total += u64::from(p.len);
            fill(&mut s, p.flow.index(), &mut rng); // stays backlogged
            for (f, flow) in flows.iter().enumerate() {
                let ideal = total as f64 * f64::from(flow.weight) / wsum as f64;
                let lag = (served[f] as f64 - ideal).abs();
                let tol = tolerance(u64::from(flow.weight));
                assert!(
                    lag <= tol,
                    "seed {seed}: {alg} flow {f} (w {}) off its share by {lag:.0} B > {tol:.0} B",
                    flow.weight
                );
            }
        }
    }
}

macro_rules! each_alg {
    ($($name:ident => $kind:expr, work_conserving: $wc:expr;)+) => {$(
        mod $name {
            use super::*;
            #[test]
            fn conservation_order_and_work_conservation() {
                for seed in SEEDS {
                    run_random($kind, seed, $wc);
                }
            }
            #[test]
            fn bad_packets_are_refused_with_a_reason() {
                rejects_bad_packets($kind);
            }
            #[test]
            fn conservation_and_order_across_flow_lifecycle() {
                for seed in SEEDS {
                    run_lifecycle($kind, seed, $wc);
                }
            }
        }
    )+};
}

each_alg! {
    fifo => AlgKind::Fifo, work_conserving: true;
    prio => AlgKind::Prio, work_conserving: true;
    drr => AlgKind::Drr, work_conserving: true;
    fq => AlgKind::Fq, work_conserving: true;
    wf2q_plus => AlgKind::Wf2qPlus, work_conserving: true;
    qfq => AlgKind::Qfq, work_conserving: true;
    qfq_plus => AlgKind::QfqPlus, work_conserving: true;
    htb => AlgKind::Hierarchy, work_conserving: true;
    srpt => AlgKind::Srpt, work_conserving: true;
    edf => AlgKind::Edf, work_conserving: true;
    lstf => AlgKind::Lstf, work_conserving: true;
    stfq => AlgKind::Stfq, work_conserving: true;
    eiffel_prio => AlgKind::EiffelPrio, work_conserving: true;
    shaped_drr => AlgKind::ShapedDrr, work_conserving: false;
}

/// DRR: within one quantum per unit of weight per round, i.e. a flow never
/// leads or trails its share by more than its quantum plus one packet (the
/// round in progress), scaled by the worst other flow.
#[test]
fn drr_shares_within_one_quantum_per_round() {
    let unit = SchedulerConfig::new(AlgKind::Drr).quantum_unit as f64;
    shares_follow_weights(AlgKind::Drr, |w| (w as f64 + 16.0) * unit + 1500.0);
}

/// FQ: DRR's bound with FQ's quantum (one quantum per unit of the smallest
/// weight per round); the new-flow list never applies to permanently
/// backlogged flows after their first turn.
#[test]
fn fq_shares_within_one_quantum_per_round() {
    let q = SchedulerConfig::new(AlgKind::Fq).fq_quantum as f64;
    shares_follow_weights(AlgKind::Fq, |w| (w as f64 + 16.0) * q + 1500.0);
}

/// WF²Q+: B-WFI of one maximum packet plus the flow's own packet: a flow
/// never trails its share by more than L + L_k, nor leads it by more than
/// L_k plus its share of one packet (all flows are backlogged, so φ_k is
/// w_k / Σ w).
#[test]
fn wf2q_plus_shares_within_two_packets() {
    shares_follow_weights(AlgKind::Wf2qPlus, |_w| 2.0 * 1500.0 + 1.0);
}

/// QFQ: B-WFI about 5 maximum packets of the flow (its T-WFI is
/// 6·L_k/φ_k + (L − L_k) in time, i.e. 6·L_k in its own bytes).
#[test]
fn qfq_shares_within_its_bound() {
    shares_follow_weights(AlgKind::Qfq, |_w| 7.0 * 1500.0);
}

/// QFQ+: as QFQ per aggregate (8·L_k in the flow's bytes, see
/// `tests/fair.rs`), plus up to one turn of its own aggregate (≤ 8·L with
/// aggregates of up to 8 equal flows) and one maximum packet.
#[test]
fn qfq_plus_shares_within_its_bound() {
    shares_follow_weights(AlgKind::QfqPlus, |_w| (8.0 + 8.0 + 1.0) * 1500.0);
}

/// Reports the algorithm a visit received and the packets it still holds.
struct Inspect;

impl VisitScheduler for Inspect {
    type Output = (&'static str, usize);
    fn visit<S: Scheduler + Send + 'static>(self, sched: S) -> Self::Output {
        (sched.name(), sched.queued())
    }
}

/// `AnyScheduler::visit` hands over the very algorithm that was built, with
/// the packets it already holds.
#[test]
fn visit_hands_over_each_algorithm_with_its_packets() {
    let flows = vec![FlowParams::default(); 4];
    for &alg in AlgKind::ALL {
        let mut sched = build(alg, &flows, 64);
        for i in 0..10u64 {
            let flow = FlowId((i % 4) as u32);
            sched
                .enqueue(Instant::from_nanos(i), Packet::new(flow, 100, i))
                .expect("room for ten packets");
        }
        assert_eq!(sched.visit(Inspect), (alg.name(), 10), "{}", alg.name());
    }
}
