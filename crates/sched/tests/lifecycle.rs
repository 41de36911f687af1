//! The flow lifecycle of every algorithm (`Scheduler::add_flow`,
//! `change_flow`, `remove_flow`, `flow_queued`): errors, purging, reuse of
//! a removed id, weight changes showing in the shares, no allocation, and
//! random interleavings of lifecycle calls with traffic checked against a
//! model (proptest).

use std::collections::VecDeque;

use proptest::prelude::*;

use pspat_sched::{
    AlgKind, AnyScheduler, DropReason, FlowError, FlowId, FlowParams, FlowTable, Instant, Packet,
    Rejected, Scheduler, SchedulerConfig,
};

/// `slots` flow slots, the first `initial` present with `params(i)`.
fn build_with(alg: AlgKind, slots: usize, initial: &[FlowParams], capacity: usize) -> AnyScheduler {
    let mut cfg = SchedulerConfig::new(alg);
    cfg.capacity = capacity;
    let table = FlowTable::with_capacity(slots, initial.to_vec()).expect("valid table");
    cfg.build(table).expect("valid config")
}

/// Shaping algorithms hold packets back: time must pass for them to leave.
fn shapes(alg: AlgKind) -> bool {
    alg == AlgKind::ShapedDrr
}

/// Dequeues one packet, letting time pass for a shaper; `None` when empty.
fn next_packet(s: &mut AnyScheduler, now: &mut u64) -> Option<Packet> {
    for _ in 0..1_000_000 {
        if let Some(p) = s.dequeue(Instant::from_nanos(*now)) {
            return Some(p);
        }
        if s.queued() == 0 {
            return None;
        }
        *now = s
            .next_eligible(Instant::from_nanos(*now))
            .map_or(*now + 1_000, |t| t.as_nanos().max(*now + 1));
    }
    panic!(
        "{}: holds {} packets and never releases them",
        s.name(),
        s.queued()
    );
}

fn collect_purge(s: &mut AnyScheduler, flow: FlowId) -> Result<Vec<Rejected>, FlowError> {
    let mut out = Vec::new();
    s.remove_flow(flow, &mut |r| out.push(r))?;
    Ok(out)
}

/// Absent, duplicate, out-of-capacity and invalid calls are refused with
/// the right error and change nothing.
fn errors(alg: AlgKind) {
    let mut s = build_with(alg, 4, &[FlowParams::default(); 2], 64);
    let now = Instant::ZERO;
    s.enqueue(now, Packet::new(FlowId(0), 100, 1)).unwrap();
    assert_eq!(
        s.add_flow(FlowId(0), FlowParams::default()),
        Err(FlowError::Present { flow: 0 })
    );
    assert_eq!(
        s.add_flow(FlowId(4), FlowParams::default()),
        Err(FlowError::OutOfCapacity {
            flow: 4,
            capacity: 4
        })
    );
    for (bad, field) in [
        (FlowParams::weighted(0), "weight"),
        (FlowParams::weighted(65_537), "weight"),
        (
            FlowParams {
                lmax: 0,
                ..FlowParams::default()
            },
            "lmax",
        ),
        (
            FlowParams {
                lmax: 65_536,
                ..FlowParams::default()
            },
            "lmax",
        ),
        (
            FlowParams {
                priority: 64,
                ..FlowParams::default()
            },
            "priority",
        ),
    ] {
        match s.add_flow(FlowId(2), bad) {
            Err(FlowError::InvalidParams {
                flow: 2, field: f, ..
            }) => assert_eq!(f, field),
            other => panic!("{alg}: add with bad {field}: {other:?}"),
        }
        match s.change_flow(FlowId(0), bad) {
            Err(FlowError::InvalidParams {
                flow: 0, field: f, ..
            }) => assert_eq!(f, field),
            other => panic!("{alg}: change with bad {field}: {other:?}"),
        }
    }
    assert_eq!(
        s.change_flow(FlowId(3), FlowParams::default()),
        Err(FlowError::Absent { flow: 3 })
    );
    assert_eq!(
        collect_purge(&mut s, FlowId(3)).unwrap_err(),
        FlowError::Absent { flow: 3 }
    );
    assert!(matches!(
        collect_purge(&mut s, FlowId(9)),
        Err(FlowError::OutOfCapacity { flow: 9, .. })
    ));
    assert_eq!(s.flow_queued(FlowId(3)), None);
    assert_eq!(s.flow_queued(FlowId(9)), None);
    assert_eq!(s.flow_queued(FlowId(0)), Some(1));
    assert_eq!(s.flow_queued(FlowId(1)), Some(0));
    let rej = s
        .enqueue(now, Packet::new(FlowId(3), 100, 2))
        .expect_err("absent flow");
    assert_eq!(rej.reason, DropReason::UnknownFlow);
    // Nothing changed: the packet held before still leaves, alone.
    let mut t = 0;
    assert_eq!(next_packet(&mut s, &mut t).map(|p| p.token), Some(1));
    assert!(next_packet(&mut s, &mut t).is_none());
}

/// Removing a flow while others hold packets purges exactly its packets,
/// in order, with `FlowRemoved`; the others all leave afterwards, in order.
fn remove_purges(alg: AlgKind) {
    let flows: Vec<FlowParams> = (1..=5).map(FlowParams::weighted).collect();
    let mut s = build_with(alg, 6, &flows, 256);
    let now = Instant::ZERO;
    let mut token = 0;
    for round in 0..6 {
        for f in 0..5u32 {
            if round <= f {
                s.enqueue(now, Packet::new(FlowId(f), 200 + f, token))
                    .unwrap();
                token += 1;
            }
        }
    }
    // Some service first, so the victim may be in the middle of its turn.
    let mut t = 0;
    let mut out: Vec<Packet> = (0..3)
        .map(|_| next_packet(&mut s, &mut t).unwrap())
        .collect();
    let victim = FlowId(3);
    let held = s.flow_queued(victim).unwrap();
    let before = s.queued();
    let purged = collect_purge(&mut s, victim).unwrap();
    assert_eq!(purged.len(), held, "{alg}: purge count");
    assert_eq!(s.queued(), before - held, "{alg}: queued after purge");
    assert!(purged
        .iter()
        .all(|r| r.reason == DropReason::FlowRemoved && r.packet.flow == victim));
    assert!(
        purged
            .windows(2)
            .all(|w| w[0].packet.token < w[1].packet.token),
        "{alg}: purge in queue order"
    );
    assert_eq!(s.flow_queued(victim), None);
    while let Some(p) = next_packet(&mut s, &mut t) {
        assert_ne!(p.flow, victim, "{alg}: a purged flow's packet left");
        out.push(p);
    }
    let mut all: Vec<u64> = out
        .iter()
        .map(|p| p.token)
        .chain(purged.iter().map(|r| r.packet.token))
        .collect();
    all.sort_unstable();
    assert_eq!(all, (0..token).collect::<Vec<_>>(), "{alg}: conservation");
    for f in 0..5 {
        let toks: Vec<u64> = out
            .iter()
            .filter(|p| p.flow == FlowId(f))
            .map(|p| p.token)
            .collect();
        assert!(
            toks.windows(2).all(|w| w[0] < w[1]),
            "{alg}: flow {f} order"
        );
    }
}

/// A removed id is free at once: re-added with other parameters it takes
/// packets again, and none of its old ones come back.
fn reuse(alg: AlgKind) {
    let mut s = build_with(alg, 3, &[FlowParams::weighted(2); 3], 64);
    let now = Instant::ZERO;
    for i in 0..12u64 {
        s.enqueue(now, Packet::new(FlowId((i % 3) as u32), 300, i))
            .unwrap();
    }
    let purged = collect_purge(&mut s, FlowId(1)).unwrap();
    assert_eq!(purged.len(), 4);
    assert_eq!(
        s.enqueue(now, Packet::new(FlowId(1), 300, 99))
            .unwrap_err()
            .reason,
        DropReason::UnknownFlow
    );
    let fresh = FlowParams {
        weight: 7,
        lmax: 900,
        priority: 3,
    };
    s.add_flow(FlowId(1), fresh).unwrap();
    assert_eq!(s.flow_queued(FlowId(1)), Some(0));
    for i in 100..104u64 {
        s.enqueue(now, Packet::new(FlowId(1), 900, i)).unwrap();
    }
    assert_eq!(s.flow_queued(FlowId(1)), Some(4));
    let mut t = 0;
    let mut out = Vec::new();
    while let Some(p) = next_packet(&mut s, &mut t) {
        out.push(p.token);
    }
    out.sort_unstable();
    assert_eq!(out, [0, 2, 3, 5, 6, 8, 9, 11, 100, 101, 102, 103], "{alg}");
    // Remove and re-add with no packets held, twice over.
    for _ in 0..2 {
        assert!(collect_purge(&mut s, FlowId(1)).unwrap().is_empty());
        s.add_flow(FlowId(1), FlowParams::weighted(1)).unwrap();
    }
    s.enqueue(now, Packet::new(FlowId(1), 60, 7)).unwrap();
    assert_eq!(next_packet(&mut s, &mut t).map(|p| p.token), Some(7));
}

/// Serves `n` packets of two backlogged flows (refilled as they leave);
/// returns flow 1's share of the bytes.
fn share_of_flow_1(s: &mut AnyScheduler, token: &mut u64, now: &mut u64, n: usize) -> f64 {
    let mut bytes = [0u64; 2];
    for _ in 0..n {
        let p = next_packet(s, now).expect("backlogged");
        bytes[p.flow.index()] += u64::from(p.len);
        s.enqueue(Instant::from_nanos(*now), Packet::new(p.flow, 1000, *token))
            .expect("room");
        *token += 1;
    }
    bytes[1] as f64 / (bytes[0] + bytes[1]) as f64
}

/// Weighted algorithms: weights 1:1, then 1:4; the new share shows within
/// a few rounds.
fn weight_change_shows(alg: AlgKind) {
    let mut s = build_with(alg, 2, &[FlowParams::weighted(1); 2], 64);
    let mut token = 0;
    let mut now = 0;
    for f in 0..2 {
        for _ in 0..8 {
            s.enqueue(Instant::ZERO, Packet::new(FlowId(f), 1000, token))
                .unwrap();
            token += 1;
        }
    }
    let even = share_of_flow_1(&mut s, &mut token, &mut now, 2_000);
    assert!((0.45..=0.55).contains(&even), "{alg}: 1:1 share {even}");
    s.change_flow(FlowId(1), FlowParams::weighted(4)).unwrap();
    // Let the packets queued before the change (8 per flow) go by.
    share_of_flow_1(&mut s, &mut token, &mut now, 40);
    let heavy = share_of_flow_1(&mut s, &mut token, &mut now, 4_000);
    assert!((0.77..=0.83).contains(&heavy), "{alg}: 1:4 share {heavy}");
    // And back, by removing the heavy flow and adding it again light.
    let purged = collect_purge(&mut s, FlowId(1)).unwrap();
    s.add_flow(FlowId(1), FlowParams::weighted(1)).unwrap();
    for r in purged {
        s.enqueue(Instant::from_nanos(now), r.packet).unwrap();
    }
    let even = share_of_flow_1(&mut s, &mut token, &mut now, 4_000);
    assert!((0.45..=0.55).contains(&even), "{alg}: 1:1 again {even}");
}

/// Strict priority: raising a flow's priority serves its queued packets
/// next.
fn priority_change_shows(alg: AlgKind) {
    let p = |priority| FlowParams {
        priority,
        ..FlowParams::default()
    };
    let mut s = build_with(alg, 2, &[p(1), p(5)], 64);
    for i in 0..8u64 {
        s.enqueue(Instant::ZERO, Packet::new(FlowId((i % 2) as u32), 100, i))
            .unwrap();
    }
    assert_eq!(s.dequeue(Instant::ZERO).unwrap().flow, FlowId(0));
    s.change_flow(FlowId(1), p(0)).unwrap();
    let order: Vec<u32> = (0..7)
        .map(|_| s.dequeue(Instant::ZERO).unwrap().flow.0)
        .collect();
    assert_eq!(order, [1, 1, 1, 1, 0, 0, 0], "{alg}");
    assert_eq!(s.flow_queued(FlowId(1)), Some(0));
}

/// Lifecycle calls and steady traffic allocate nothing once built.
fn no_allocation(alg: AlgKind) {
    let flows: Vec<FlowParams> = (0..24).map(|i| FlowParams::weighted(1 + i % 5)).collect();
    let mut s = build_with(alg, 32, &flows, 1024);
    let mut rng = fastrand::Rng::with_seed(5);
    let mut now = 0u64;
    let step = |s: &mut AnyScheduler, rng: &mut fastrand::Rng, now: &mut u64| {
        *now += rng.u64(0..2_000);
        let f = FlowId(rng.u32(0..32));
        match rng.u8(0..20) {
            0 => {
                let _ = s.add_flow(f, FlowParams::weighted(rng.u32(1..=8)));
            }
            1 => {
                let _ = s.change_flow(f, FlowParams::weighted(rng.u32(1..=8)));
            }
            2 => {
                let _ = s.remove_flow(f, &mut |r| {
                    std::hint::black_box(r);
                });
            }
            3..=10 => {
                let _ = s.enqueue(Instant::from_nanos(*now), Packet::new(f, 500, *now));
            }
            _ => {
                let _ = s.dequeue(Instant::from_nanos(*now));
            }
        }
    };
    for _ in 0..20_000 {
        step(&mut s, &mut rng, &mut now);
    }
    let info = allocation_counter::measure(|| {
        for _ in 0..20_000 {
            step(&mut s, &mut rng, &mut now);
        }
    });
    assert_eq!(
        info.count_total, 0,
        "{alg}: {} allocations",
        info.count_total
    );
}

/// Proptest cases per algorithm: 12 (a few seconds in all), or
/// `PROPTEST_CASES` for a longer search.
fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(12)
}

macro_rules! each_alg {
    ($($name:ident => $kind:expr;)+) => {$(
        mod $name {
            use super::*;
            #[test]
            fn errors_leave_the_scheduler_unchanged() {
                errors($kind);
            }
            #[test]
            fn remove_purges_with_flow_removed_and_counts_match() {
                remove_purges($kind);
            }
            #[test]
            fn a_removed_id_can_be_reused_at_once() {
                reuse($kind);
            }
            #[test]
            fn lifecycle_and_traffic_allocate_nothing() {
                no_allocation($kind);
            }
            proptest! {
                #![proptest_config(ProptestConfig { cases: cases(), ..ProptestConfig::default() })]
                #[test]
                fn random_lifecycle_matches_a_model(ops in ops_strategy()) {
                    run_model($kind, &ops)?;
                }
            }
        }
    )+};
}

each_alg! {
    fifo => AlgKind::Fifo;
    prio => AlgKind::Prio;
    drr => AlgKind::Drr;
    fq => AlgKind::Fq;
    wf2q_plus => AlgKind::Wf2qPlus;
    qfq => AlgKind::Qfq;
    qfq_plus => AlgKind::QfqPlus;
    htb => AlgKind::Hierarchy;
    srpt => AlgKind::Srpt;
    edf => AlgKind::Edf;
    lstf => AlgKind::Lstf;
    stfq => AlgKind::Stfq;
    eiffel_prio => AlgKind::EiffelPrio;
    shaped_drr => AlgKind::ShapedDrr;
}

/// Every algorithm is listed above.
#[test]
fn every_algorithm_is_covered() {
    assert_eq!(AlgKind::ALL.len(), 14);
}

macro_rules! weighted {
    ($($name:ident => $kind:expr;)+) => {
        mod weight_change {
            use super::*;
            $(
                #[test]
                fn $name() {
                    weight_change_shows($kind);
                }
            )+
        }
    };
}

weighted! {
    drr => AlgKind::Drr;
    fq => AlgKind::Fq;
    wf2q_plus => AlgKind::Wf2qPlus;
    qfq => AlgKind::Qfq;
    qfq_plus => AlgKind::QfqPlus;
    htb => AlgKind::Hierarchy;
    stfq => AlgKind::Stfq;
}

#[test]
fn prio_priority_change_shows_at_once() {
    priority_change_shows(AlgKind::Prio);
}

#[test]
fn eiffel_prio_priority_change_shows_at_once() {
    priority_change_shows(AlgKind::EiffelPrio);
}

#[test]
fn runtime_drop_reasons_follow_flow_removed() {
    // Appended in this order: counters indexed by reason keep their layout
    // (the pipe's reasons come after the runtime's).
    assert_eq!(DropReason::ALL[6], DropReason::FlowRemoved);
    assert_eq!(DropReason::FlowRemoved.as_str(), "flow_removed");
    assert_eq!(DropReason::FlowRemoved.index(), 6);
    assert_eq!(DropReason::Fault.as_str(), "fault");
    assert_eq!(DropReason::Shutdown.as_str(), "shutdown");
    assert_eq!(DropReason::Shutdown.index(), 8);
    assert_eq!(DropReason::RandomLoss.index(), 9);
    assert_eq!(DropReason::ProfileLoss.index(), 12);
    assert_eq!(DropReason::Pie.index(), DropReason::ALL.len() - 1);
    for (i, r) in DropReason::ALL.iter().enumerate() {
        assert_eq!(r.index(), i, "{}", r.as_str());
    }
}

/// One step of a random interleaving.
#[derive(Clone, Debug)]
enum Op {
    Enqueue { flow: u32, len: u32 },
    Dequeue,
    Add { flow: u32, params: FlowParams },
    Change { flow: u32, params: FlowParams },
    Remove { flow: u32 },
}

const SLOTS: u32 = 6;

fn params_strategy() -> impl Strategy<Value = FlowParams> {
    (1u32..=64, prop_oneof![Just(1500u32), 200u32..=1500], 0u8..8).prop_map(
        |(weight, lmax, priority)| FlowParams {
            weight,
            lmax,
            priority,
        },
    )
}

fn ops_strategy() -> impl Strategy<Value = Vec<Op>> {
    let op = prop_oneof![
        6 => (0..SLOTS, 64u32..=1500).prop_map(|(flow, len)| Op::Enqueue { flow, len }),
        4 => Just(Op::Dequeue),
        1 => (0..SLOTS + 1, params_strategy()).prop_map(|(flow, params)| Op::Add { flow, params }),
        1 => (0..SLOTS, params_strategy()).prop_map(|(flow, params)| Op::Change { flow, params }),
        1 => (0..SLOTS + 1).prop_map(|flow| Op::Remove { flow }),
    ];
    prop::collection::vec(op, 1..300)
}

/// Runs `ops` on `alg` and on a model (per-flow FIFOs of tokens): every
/// departure is its flow's oldest packet, every purge is exactly the flow's
/// queue, `flow_queued` and `queued` agree, errors match presence, and a
/// work-conserving algorithm never idles while holding packets.
fn run_model(alg: AlgKind, ops: &[Op]) -> Result<(), TestCaseError> {
    let initial = [FlowParams::weighted(3), FlowParams::weighted(1)];
    let mut s = build_with(alg, SLOTS as usize, &initial, 64);
    let mut present: Vec<Option<FlowParams>> = vec![None; SLOTS as usize];
    present[0] = Some(initial[0]);
    present[1] = Some(initial[1]);
    let mut model: Vec<VecDeque<u64>> = vec![VecDeque::new(); SLOTS as usize];
    let mut now = 0u64;
    for (token, op) in ops.iter().enumerate() {
        let token = token as u64;
        now += 37;
        match *op {
            Op::Enqueue { flow, len } => {
                let f = flow as usize;
                // Packets within the flow's lmax (QFQ refuses longer ones).
                let len = present[f].map_or(len, |p| len.min(p.lmax));
                let pkt = Packet::new(FlowId(flow), len, token);
                match s.enqueue(Instant::from_nanos(now), pkt) {
                    Ok(()) => {
                        prop_assert!(present[f].is_some(), "{alg}: accepted for absent flow");
                        model[f].push_back(token);
                    }
                    Err(rej) => {
                        prop_assert_eq!(rej.packet, pkt);
                        if present[f].is_none() {
                            prop_assert_eq!(rej.reason, DropReason::UnknownFlow);
                        } else {
                            prop_assert_eq!(rej.reason, DropReason::QueueFull, "{}", alg);
                        }
                    }
                }
            }
            Op::Dequeue => {
                let held = s.queued();
                let got = if shapes(alg) {
                    next_packet(&mut s, &mut now)
                } else {
                    s.dequeue(Instant::from_nanos(now))
                };
                match got {
                    Some(p) => {
                        let head = model[p.flow.index()].pop_front();
                        prop_assert_eq!(head, Some(p.token), "{}: not the flow's oldest", alg);
                    }
                    None => prop_assert_eq!(held, 0, "{}: idled while holding packets", alg),
                }
            }
            Op::Add { flow, params } => {
                let r = s.add_flow(FlowId(flow), params);
                if flow >= SLOTS {
                    let out_of_capacity = matches!(r, Err(FlowError::OutOfCapacity { .. }));
                    prop_assert!(out_of_capacity, "{}: {:?}", alg, r);
                } else if present[flow as usize].is_some() {
                    prop_assert_eq!(r, Err(FlowError::Present { flow }));
                } else {
                    prop_assert_eq!(r, Ok(()), "{}", alg);
                    present[flow as usize] = Some(params);
                }
            }
            Op::Change { flow, params } => {
                let r = s.change_flow(FlowId(flow), params);
                if present[flow as usize].is_some() {
                    prop_assert_eq!(r, Ok(()), "{}", alg);
                    present[flow as usize] = Some(params);
                } else {
                    prop_assert_eq!(r, Err(FlowError::Absent { flow }));
                }
            }
            Op::Remove { flow } => {
                let r = collect_purge(&mut s, FlowId(flow));
                if flow >= SLOTS {
                    let out_of_capacity = matches!(r, Err(FlowError::OutOfCapacity { .. }));
                    prop_assert!(out_of_capacity, "{}: {:?}", alg, r);
                } else if present[flow as usize].is_some() {
                    let purged = r.expect("present flow removes");
                    let got: Vec<u64> = purged.iter().map(|r| r.packet.token).collect();
                    let want: Vec<u64> = model[flow as usize].drain(..).collect();
                    prop_assert_eq!(got, want, "{}: purge", alg);
                    prop_assert!(purged.iter().all(|r| r.reason == DropReason::FlowRemoved));
                    present[flow as usize] = None;
                } else {
                    prop_assert_eq!(r.unwrap_err(), FlowError::Absent { flow });
                }
            }
        }
        let held: usize = model.iter().map(VecDeque::len).sum();
        prop_assert_eq!(s.queued(), held, "{}: queued() after {:?}", alg, op);
        for f in 0..SLOTS as usize {
            let want = present[f].map(|_| model[f].len());
            prop_assert_eq!(s.flow_queued(FlowId(f as u32)), want, "{}: flow {}", alg, f);
        }
    }
    // Drain: everything left comes out, each flow in order.
    while let Some(p) = next_packet(&mut s, &mut now) {
        let head = model[p.flow.index()].pop_front();
        prop_assert_eq!(head, Some(p.token), "{}: drain order", alg);
    }
    prop_assert!(
        model.iter().all(VecDeque::is_empty),
        "{}: packets lost",
        alg
    );
    Ok(())
}

/// A described tree: flows come and go inside their leaves (a DRR leaf of
/// three slots and a FIFO leaf of two); removal purges from the right leaf
/// and keeps the hierarchy's totals, and the tree keeps serving both
/// leaves.
#[test]
fn hierarchy_leaves_take_flows_added_changed_and_removed() {
    use pspat_sched::{Hierarchy, HierarchyConfig, NodeConfig};
    let un = i64::MAX;
    let mut fifo_leaf = NodeConfig::leaf("b", "root", un, un, 1, 2);
    fifo_leaf.leaf_alg = Some("fifo".to_string());
    let cfg = HierarchyConfig::new(vec![
        NodeConfig::root("root", un),
        NodeConfig::leaf("a", "root", un, un, 1, 3),
        fifo_leaf,
    ]);
    // Slots 0..3 in leaf a (DRR), 3..5 in leaf b (FIFO); 0 and 3 present.
    let mut table = FlowTable::with_capacity(5, vec![FlowParams::weighted(1)]).unwrap();
    table.insert(FlowId(3), FlowParams::weighted(1)).unwrap();
    let mut h = Hierarchy::new(&cfg, table, 64, 1500).unwrap();
    let now = Instant::ZERO;
    assert_eq!(
        h.enqueue(now, Packet::new(FlowId(1), 100, 0))
            .unwrap_err()
            .reason,
        DropReason::UnknownFlow
    );
    h.add_flow(FlowId(1), FlowParams::weighted(4)).unwrap();
    h.add_flow(FlowId(4), FlowParams::weighted(1)).unwrap();
    for i in 0..20u64 {
        let flow = FlowId([0, 1, 3, 4][i as usize % 4]);
        h.enqueue(now, Packet::new(flow, 100, i)).unwrap();
    }
    assert_eq!(h.flow_queued(FlowId(1)), Some(5));
    assert_eq!(h.flow_queued(FlowId(4)), Some(5));
    assert_eq!(h.flow_queued(FlowId(2)), None);
    h.change_flow(FlowId(1), FlowParams::weighted(1)).unwrap();
    let mut purged = Vec::new();
    h.remove_flow(FlowId(4), &mut |r| purged.push(r)).unwrap();
    h.remove_flow(FlowId(1), &mut |r| purged.push(r)).unwrap();
    assert_eq!(purged.len(), 10);
    assert!(purged.iter().all(|r| r.reason == DropReason::FlowRemoved));
    assert_eq!(
        purged.iter().map(|r| r.packet.flow.0).collect::<Vec<_>>(),
        [4, 4, 4, 4, 4, 1, 1, 1, 1, 1],
        "purged packets keep their global flow ids"
    );
    assert_eq!(h.queued(), 10);
    let mut left = Vec::new();
    while let Some(p) = h.dequeue(now) {
        left.push(p);
    }
    assert_eq!(left.len(), 10);
    assert!(left
        .iter()
        .all(|p| p.flow == FlowId(0) || p.flow == FlowId(3)));
    assert!(h.is_empty() && h.dequeue(now).is_none());
    // Both leaves still take packets.
    h.add_flow(FlowId(2), FlowParams::weighted(2)).unwrap();
    h.enqueue(now, Packet::new(FlowId(2), 100, 50)).unwrap();
    h.enqueue(now, Packet::new(FlowId(3), 100, 51)).unwrap();
    let mut got: Vec<u64> = std::iter::from_fn(|| h.dequeue(now).map(|p| p.token)).collect();
    got.sort_unstable();
    assert_eq!(got, [50, 51]);
}
