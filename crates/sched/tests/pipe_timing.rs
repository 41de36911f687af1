//! Exact times: delay to the ns, the rate bound, burst after idle, limits,
//! order, replay from one seed, a stalled delay line, and no allocation.

use pspat_sched::pipe::{
    Framing, GilbertElliott, Jitter, JitterDistribution, LossState, NetemReorder, Pipe, PipeConfig,
    QueueConfig, QueueLimit, Red,
};
use pspat_sched::{
    AlgKind, DropReason, Fate, FlowId, FlowParams, FlowTable, Instant, Packet, Scheduler,
    SchedulerConfig,
};

use crate::pipe_common::{assert_conserved, at, drive, fifo_pipe, rate, Run};

const MS: u64 = 1_000_000;

/// Random arrivals of one flow: lengths 64..=1500, gaps 0..`max_gap` ns.
fn arrivals(seed: u64, n: usize, flows: u32, max_gap: u64) -> Vec<(Instant, Packet)> {
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut t = 0;
    (0..n)
        .map(|i| {
            t += rng.u64(0..max_gap);
            let pkt = Packet::new(FlowId(rng.u32(0..flows)), rng.u32(64..=1500), i as u64);
            (at(t), pkt)
        })
        .collect()
}

/// The FIFO link model by hand: start = max(arrival, previous end),
/// end = start + len·ns_per_byte, exit = end + delay.
fn expected_exits(arrivals: &[(Instant, Packet)], ns_per_byte: u64, delay: u64) -> Vec<u64> {
    let mut end = 0;
    arrivals
        .iter()
        .map(|(a, p)| {
            end = end.max(a.as_nanos()) + u64::from(p.len) * ns_per_byte;
            end + delay
        })
        .collect()
}

fn exit_times(run: &Run) -> Vec<u64> {
    run.with_fate(Fate::Transmit)
        .map(|e| e.at.as_nanos())
        .collect()
}

#[test]
fn exit_is_link_departure_plus_delay_to_the_nanosecond() {
    // 8 Gbit/s is 1 ns per byte, 10 Mbit/s is 800 ns per byte: both exact.
    for (bps, ns_per_byte, max_gap) in [
        (8_000_000_000u64, 1u64, 3_000u64),
        (10_000_000, 800, 2 * MS),
    ] {
        for delay in [0, 20 * MS, 123_457] {
            let cfg = PipeConfig {
                bw: Some(rate(bps)),
                delay_ns: delay,
                queue: QueueConfig {
                    limit: QueueLimit::Slots(100_000),
                    ..QueueConfig::default()
                },
                delay_line_capacity: 100_000,
                ..PipeConfig::default()
            };
            let arr = arrivals(1, 5_000, 1, max_gap);
            let mut pipe = fifo_pipe(cfg, 1, 100_000);
            let run = drive(&mut pipe, &arr);
            assert!(run.rejected.is_empty());
            assert_eq!(
                exit_times(&run),
                expected_exits(&arr, ns_per_byte, delay),
                "{bps} bit/s, delay {delay}"
            );
            // The driver only wakes at poll_at or at arrivals: every exit is
            // handed out exactly at its time, so poll_at is exact.
            assert!(run.exits.iter().all(|(now, e)| *now == e.at));
            let tokens: Vec<u64> = run.exits.iter().map(|(_, e)| e.packet.token).collect();
            assert_eq!(tokens, (0..5_000).collect::<Vec<_>>());
        }
    }
}

#[test]
fn framing_times_each_packet_by_its_bytes_on_the_wire() {
    // 10 Mbit/s: 800 ns a byte. Random lengths, random gaps; the exits are
    // the FIFO model's with each length replaced by its wire length.
    let framings = [
        Framing {
            packet_overhead: 24,
            ..Framing::NONE
        },
        Framing {
            packet_overhead: -40,
            ..Framing::NONE
        },
        Framing {
            packet_overhead: 8,
            cell_size: 48,
            cell_overhead: 5,
        },
    ];
    for framing in framings {
        let cfg = PipeConfig {
            bw: Some(rate(10_000_000)),
            delay_ns: 3 * MS,
            framing,
            queue: QueueConfig {
                limit: QueueLimit::Slots(100_000),
                ..QueueConfig::default()
            },
            delay_line_capacity: 100_000,
            ..PipeConfig::default()
        };
        let arr = arrivals(3, 3_000, 1, 2 * MS);
        let wire: Vec<(Instant, Packet)> = arr
            .iter()
            .map(|(a, p)| (*a, Packet::new(p.flow, framing.wire_len(p.len), p.token)))
            .collect();
        let mut pipe = fifo_pipe(cfg, 1, 100_000);
        let run = drive(&mut pipe, &arr);
        assert!(run.rejected.is_empty());
        assert_eq!(
            exit_times(&run),
            expected_exits(&wire, 800, 3 * MS),
            "{framing:?}"
        );
        // Counters count the packets' own bytes.
        let bytes: u64 = arr.iter().map(|(_, p)| u64::from(p.len)).sum();
        assert_eq!(pipe.counters().out_bytes, bytes);
    }
}

#[test]
fn a_live_framing_change_times_the_next_packet_to_start() {
    // 8 Mbit/s: 1 µs a byte. Ten 1000-byte packets at once; after the
    // first has started, cells of 48 + 5 bytes: 1000 bytes are 21 cells,
    // 1 113 bytes on the wire.
    let us = 1_000;
    let mut cfg = PipeConfig {
        bw: Some(rate(8_000_000)),
        delay_line_capacity: 64,
        ..PipeConfig::default()
    };
    let mut pipe = fifo_pipe(cfg.clone(), 1, 64);
    for i in 0..10 {
        pipe.enqueue(at(0), Packet::new(FlowId(0), 1_000, i))
            .unwrap();
    }
    cfg.framing = Framing {
        packet_overhead: 0,
        cell_size: 48,
        cell_overhead: 5,
    };
    pipe.reconfigure(at(500 * us), &cfg).unwrap();
    let mut exits = Vec::new();
    while let Some(t) = pipe.poll_at() {
        pipe.release(t, &mut |e| exits.push(e.at.as_nanos()));
    }
    let mut want = vec![1_000 * us];
    for i in 1..10 {
        want.push(1_000 * us + i * 1_113 * us);
    }
    assert_eq!(exits, want);
    // A framing out of range is refused and changes nothing.
    cfg.framing.cell_overhead = 5_000;
    assert!(pipe.reconfigure(at(20 * MS), &cfg).is_err());
}

#[test]
fn unlimited_link_adds_only_the_delay() {
    let cfg = PipeConfig {
        delay_ns: 5 * MS,
        ..PipeConfig::default()
    };
    let arr = arrivals(2, 1_000, 1, 10_000);
    let mut pipe = fifo_pipe(cfg, 1, 1_000);
    let run = drive(&mut pipe, &arr);
    assert_eq!(exit_times(&run), expected_exits(&arr, 0, 5 * MS));
}

/// Over every window between two departures, bytes ≤ bw·W + one packet + burst.
fn check_rate_bound(run: &Run, bps: u64, delay: u64, burst: u64) -> (u64, u64) {
    let deps: Vec<(u64, u64)> = run
        .with_fate(Fate::Transmit)
        .map(|e| (e.at.as_nanos() - delay, u64::from(e.packet.len)))
        .collect();
    let mut prefix = vec![0u64];
    for d in &deps {
        prefix.push(prefix.last().unwrap() + d.1);
    }
    for i in 0..deps.len() {
        for j in i..deps.len() {
            let bytes = prefix[j + 1] - prefix[i];
            let w = deps[j].0 - deps[i].0;
            let allowed =
                u128::from(bps) * u128::from(w) / 8_000_000_000 + 1_500 + u128::from(burst);
            assert!(
                u128::from(bytes) <= allowed,
                "window {i}..={j}: {bytes} B in {w} ns > {allowed}"
            );
        }
    }
    (prefix[deps.len()], deps.last().unwrap().0 - deps[0].0)
}

#[test]
fn link_rate_stays_within_bw_times_window_plus_one_packet_plus_burst() {
    let bps = 10_000_000u64;
    for burst in [0u64, 3_000, 20_000] {
        // Four DRR flows; bursts of arrivals separated by idle periods.
        let mut rng = fastrand::Rng::with_seed(burst);
        let mut arr = Vec::new();
        let mut t = 0;
        for i in 0..3_000u64 {
            t += if i % 200 == 0 {
                50 * MS
            } else {
                rng.u64(0..200_000)
            };
            arr.push((
                at(t),
                Packet::new(FlowId(rng.u32(0..4)), rng.u32(64..=1500), i),
            ));
        }
        let cfg = PipeConfig {
            bw: Some(rate(bps)),
            burst_bytes: burst,
            delay_ns: 3 * MS,
            queue: QueueConfig {
                limit: QueueLimit::Slots(10_000),
                ..QueueConfig::default()
            },
            delay_line_capacity: 10_000,
            ..PipeConfig::default()
        };
        let mut sched = SchedulerConfig::new(AlgKind::Drr);
        sched.capacity = 10_000;
        let drr = sched.build(FlowTable::uniform(4).unwrap()).unwrap();
        let mut pipe = Pipe::new(cfg, drr, 4).unwrap();
        let run = drive(&mut pipe, &arr);
        assert_eq!(run.exits.len(), 3_000);
        let (bytes, span) = check_rate_bound(&run, bps, 3 * MS, burst);
        // Not vacuous: the offered load exceeds the link, so the link is busy
        // most of the time and the bound is nearly tight.
        let achieved = bytes as f64 * 8e9 / span as f64;
        assert!(achieved > 0.5 * bps as f64, "{achieved}");
    }
}

#[test]
fn burst_after_idle_leaves_at_line_speed_then_the_rate_applies() {
    // 8 Mbit/s: 1 µs per byte. burst 4500 B.
    let cfg = PipeConfig {
        bw: Some(rate(8_000_000)),
        burst_bytes: 4_500,
        ..PipeConfig::default()
    };
    let mut arr = Vec::new();
    // Idle for 1 s: credit min(4500, 10⁶) = 4500: three packets leave at once.
    for i in 0..5 {
        arr.push((at(1_000 * MS), Packet::new(FlowId(0), 1_500, i)));
    }
    // The link ends at 1.003 s; 2 ms of idle give 2000 B of credit.
    arr.push((at(1_005 * MS), Packet::new(FlowId(0), 1_500, 5)));
    arr.push((at(1_005 * MS), Packet::new(FlowId(0), 1_500, 6)));
    // An arrival while the link is busy gets no credit.
    arr.push((at(1_005 * MS + 500_000), Packet::new(FlowId(0), 1_000, 7)));
    let mut pipe = fifo_pipe(cfg, 1, 64);
    let run = drive(&mut pipe, &arr);
    let s = 1_000 * MS;
    assert_eq!(
        exit_times(&run),
        [
            s,
            s,
            s,
            s + 1_500_000,
            s + 3_000_000,
            s + 5 * MS,             // covered by credit
            s + 5 * MS + 1_000_000, // 500 B covered, 1000 B paid
            s + 5 * MS + 2_000_000, // behind it, 1000 B paid
        ]
    );
    // No burst: the same arrivals pay for every byte.
    let mut pipe = fifo_pipe(
        PipeConfig {
            bw: Some(rate(8_000_000)),
            ..PipeConfig::default()
        },
        1,
        64,
    );
    let run = drive(&mut pipe, &arr);
    assert_eq!(
        exit_times(&run)[..3],
        [s + 1_500_000, s + 3_000_000, s + 4_500_000]
    );
}

#[test]
fn slot_limit_drops_exactly_what_does_not_fit() {
    let cfg = PipeConfig {
        bw: Some(rate(1_000_000)),
        queue: QueueConfig {
            limit: QueueLimit::Slots(10),
            ..QueueConfig::default()
        },
        ..PipeConfig::default()
    };
    let mut pipe = fifo_pipe(cfg, 1, 1_000);
    let arr: Vec<_> = (0..25)
        .map(|i| (at(0), Packet::new(FlowId(0), 1_000, i)))
        .collect();
    let run = drive(&mut pipe, &arr);
    // The first packet is on the link when the second arrives; ten more fit
    // in the queue: 11 accepted, 14 refused with FlowLimit, in arrival order.
    assert_eq!(run.rejected.len(), 14);
    assert!(run
        .rejected
        .iter()
        .all(|(_, r)| r.reason == DropReason::FlowLimit));
    let refused: Vec<u64> = run.rejected.iter().map(|(_, r)| r.packet.token).collect();
    assert_eq!(refused, (11..25).collect::<Vec<_>>());
    assert_eq!(pipe.counters().dropped(DropReason::FlowLimit), 14);
    assert_eq!(pipe.counters().out_packets, 11);
}

#[test]
fn byte_limit_is_a_hard_bound() {
    let cfg = PipeConfig {
        bw: Some(rate(1_000_000)),
        queue: QueueConfig {
            limit: QueueLimit::Bytes(5_000),
            ..QueueConfig::default()
        },
        ..PipeConfig::default()
    };
    let mut pipe = fifo_pipe(cfg, 1, 1_000);
    let mut arr: Vec<_> = (0..10)
        .map(|i| (at(0), Packet::new(FlowId(0), 1_500, i)))
        .collect();
    arr.push((at(0), Packet::new(FlowId(0), 500, 10))); // exactly fills 5000
    arr.push((at(0), Packet::new(FlowId(0), 1, 11))); // one byte too many
    let mut max_bytes = 0;
    let mut t = 0;
    for (a, p) in &arr {
        let _ = pipe.enqueue(*a, *p);
        max_bytes = max_bytes.max(pipe.queue_len(FlowId(0)).unwrap().1);
        t = a.as_nanos();
    }
    // One packet on the link, three (4500 B) queued, then the 500 B one.
    assert_eq!(pipe.queue_len(FlowId(0)), Some((4, 5_000)));
    assert_eq!(max_bytes, 5_000);
    let c = *pipe.counters();
    assert_eq!(c.dropped(DropReason::FlowLimit), 7);
    assert_eq!(
        c.dropped_bytes[DropReason::FlowLimit.index()],
        6 * 1_500 + 1
    );
    assert_conserved(&pipe);
    let mut n = 0;
    while let Some(p) = pipe.poll_at() {
        t = t.max(p.as_nanos());
        pipe.release(at(t), &mut |_| n += 1);
    }
    assert_eq!(n, 5);
}

#[test]
fn other_refusals_are_counted_and_handed_back() {
    let cfg = PipeConfig::default();
    let fifo = pspat_sched::Fifo::new(FlowTable::uniform(2).unwrap(), 1).unwrap();
    let mut pipe = Pipe::new(cfg, fifo, 2).unwrap();
    let e = pipe
        .enqueue(at(0), Packet::new(FlowId(9), 100, 1))
        .unwrap_err();
    assert_eq!((e.reason, e.packet.token), (DropReason::UnknownFlow, 1));
    let e = pipe
        .enqueue(at(0), Packet::new(FlowId(0), 0, 2))
        .unwrap_err();
    assert_eq!(e.reason, DropReason::BadLength);
    pipe.enqueue(at(0), Packet::new(FlowId(0), 100, 3)).unwrap();
    // The FIFO's arena holds one packet, but the second enqueue first moves
    // the first one onto the (unlimited) link.
    pipe.enqueue(at(0), Packet::new(FlowId(1), 100, 4)).unwrap();
    assert_conserved(&pipe);
    assert_eq!(pipe.counters().dropped_total(), 2);
    assert!(Pipe::new(
        PipeConfig::default(),
        pspat_sched::Fifo::new(FlowTable::uniform(1).unwrap(), 1).unwrap(),
        0
    )
    .is_err());
    let bad = QueueConfig {
        red: Some(Red {
            gentle: false,
            w_q: 0.0,
            min_th: 1,
            max_th: 2,
            max_p: 0.1,
        }),
        ..QueueConfig::default()
    };
    let msg = pipe.set_queue(FlowId(0), bad).unwrap_err().to_string();
    assert!(msg.contains("w_q"), "{msg}");
    assert!(pipe.set_queue(FlowId(5), QueueConfig::default()).is_err());
}

#[test]
fn jitter_keeps_order_unless_reorder_is_asked() {
    for dist in [
        JitterDistribution::Uniform,
        JitterDistribution::Normal,
        JitterDistribution::Pareto,
    ] {
        let arr = arrivals(3, 3_000, 1, 200_000);
        let cfg = |reorder| PipeConfig {
            bw: Some(rate(1_000_000_000)),
            delay_ns: 10 * MS,
            jitter: Some(Jitter {
                ns: 5 * MS,
                distribution: dist,
            }),
            reorder,
            delay_line_capacity: 10_000,
            seed: 11,
            ..PipeConfig::default()
        };
        // The link alone (no delay, no jitter): each packet's departure.
        let departures: Vec<u64> = expected_exits(&arr, 8, 0);
        let mut pipe = fifo_pipe(cfg(false), 1, 1_000);
        let kept = drive(&mut pipe, &arr);
        let tokens: Vec<u64> = kept.exits.iter().map(|(_, e)| e.packet.token).collect();
        assert_eq!(tokens, (0..3_000).collect::<Vec<_>>(), "{dist:?}");
        assert!(kept.exits.windows(2).all(|w| w[0].1.at <= w[1].1.at));
        for (_, e) in &kept.exits {
            assert!(e.at.as_nanos() >= departures[e.packet.token as usize]);
        }
        let mut pipe = fifo_pipe(cfg(true), 1, 1_000);
        let free = drive(&mut pipe, &arr);
        let inversions = free
            .exits
            .windows(2)
            .filter(|w| w[0].1.packet.token > w[1].1.packet.token)
            .count();
        assert!(
            inversions > 100,
            "{dist:?}: {inversions} inversions with reorder"
        );
        for (_, e) in &free.exits {
            assert!(e.at.as_nanos() >= departures[e.packet.token as usize]);
        }
        assert!(
            free.exits.windows(2).all(|w| w[0].1.at <= w[1].1.at),
            "exit order"
        );
    }
}

/// A pipe with every impairment on.
fn everything(seed: u64) -> PipeConfig {
    PipeConfig {
        bw: Some(rate(50_000_000)),
        burst_bytes: 10_000,
        framing: Framing {
            packet_overhead: 24,
            cell_size: 64,
            cell_overhead: 4,
        },
        delay_ns: 2 * MS,
        profile: Some(
            pspat_sched::pipe::DelayProfile::new((0..20).map(|i| i * 10_000).collect(), 0.9)
                .unwrap(),
        ),
        jitter: Some(Jitter {
            ns: MS,
            distribution: JitterDistribution::Normal,
        }),
        jitter_correlation: 0.3,
        reorder: true,
        netem_reorder: Some(NetemReorder {
            probability: 0.1,
            gap: 3,
            correlation: 0.0,
        }),
        slots: Some(pspat_sched::pipe::Slots {
            interval: pspat_sched::pipe::SlotInterval::Uniform {
                min_ns: 100_000,
                max_ns: 400_000,
            },
            packets: Some(5),
            bytes: Some(6_000),
        }),
        queue: QueueConfig {
            limit: QueueLimit::Bytes(60_000),
            plr: 0.02,
            red: Some(Red {
                gentle: true,
                w_q: 0.05,
                min_th: 10_000,
                max_th: 40_000,
                max_p: 0.1,
            }),
            gilbert_elliott: Some(GilbertElliott {
                p: 0.01,
                r: 0.2,
                loss_bad: 0.5,
                loss_good: 0.0,
            }),
            loss_state: Some(LossState {
                p13: 0.02,
                p31: 0.2,
                p32: 0.3,
                p23: 0.1,
                p14: 0.01,
            }),
            duplicate: 0.05,
            duplicate_correlation: 0.3,
            corrupt: 0.05,
            corrupt_correlation: 0.2,
            ecn: false,
            loss_ecn: false,
            codel: None,
            pie: None,
        },
        delay_line_capacity: 4_096,
        held_capacity: 65_536,
        held_limit: None,
        seed,
    }
}

#[test]
fn one_seed_replays_every_exit_exactly() {
    let arr = arrivals(4, 20_000, 4, 150_000);
    let run_with = |seed| {
        let mut sched = SchedulerConfig::new(AlgKind::Qfq);
        sched.capacity = 4_096;
        let s = sched.build(FlowTable::uniform(4).unwrap()).unwrap();
        let mut pipe = Pipe::new(everything(seed), s, 4).unwrap();
        let run = drive(&mut pipe, &arr);
        (run.exits, run.rejected, *pipe.counters())
    };
    let a = run_with(42);
    let b = run_with(42);
    assert_eq!(a.0, b.0);
    assert_eq!(a.1, b.1);
    assert_eq!(a.2, b.2);
    // Every impairment actually fired.
    let c = &a.2;
    for r in [
        DropReason::RandomLoss,
        DropReason::BurstLoss,
        DropReason::Red,
        DropReason::ProfileLoss,
    ] {
        assert!(c.dropped(r) > 0, "{r:?} never fired: {c:?}");
    }
    assert!(c.duplicates > 0);
    let other = run_with(43);
    assert_ne!(a.0, other.0, "another seed gives another run");
}

#[test]
fn a_full_delay_line_stops_the_link_and_loses_nothing() {
    let cfg = PipeConfig {
        bw: Some(rate(8_000_000_000)),
        delay_ns: MS,
        delay_line_capacity: 4,
        queue: QueueConfig {
            limit: QueueLimit::Slots(1_000),
            ..QueueConfig::default()
        },
        ..PipeConfig::default()
    };
    let arr: Vec<_> = (0..100)
        .map(|i| (at(i * 100), Packet::new(FlowId(0), 100, i)))
        .collect();
    let mut pipe = fifo_pipe(cfg, 1, 1_000);
    let run = drive(&mut pipe, &arr);
    assert!(run.rejected.is_empty());
    assert_eq!(pipe.counters().out_packets, 100);
    assert!(pipe.counters().link_stalls > 0);
    // Four in flight per millisecond of delay: packet i leaves at
    // (i/4 + 1) ms and a bit; never before its departure + delay.
    let tokens: Vec<u64> = run.exits.iter().map(|(_, e)| e.packet.token).collect();
    assert_eq!(tokens, (0..100).collect::<Vec<_>>());
    for (_, e) in &run.exits {
        let i = e.packet.token;
        assert!(e.at.as_nanos() >= i * 100 + 100 + MS);
        assert!(e.at.as_nanos() >= (i / 4 + 1) * MS, "{i}: {:?}", e.at);
    }
}

#[test]
fn removing_a_flow_counts_its_queued_packets() {
    let mut sched = SchedulerConfig::new(AlgKind::Drr);
    sched.capacity = 64;
    let s = sched.build(FlowTable::uniform(2).unwrap()).unwrap();
    let cfg = PipeConfig {
        bw: Some(rate(1_000_000)),
        ..PipeConfig::default()
    };
    let mut pipe = Pipe::new(cfg, s, 2).unwrap();
    for i in 0..10 {
        pipe.enqueue(at(0), Packet::new(FlowId(i as u32 % 2), 500, i))
            .unwrap();
    }
    let mut purged = Vec::new();
    pipe.remove_flow(FlowId(1), &mut |r| purged.push(r.packet.token))
        .unwrap();
    // Packet 0 (flow 0) is on the link; flow 1 holds 1, 3, 5, 7, 9.
    assert_eq!(purged, [1, 3, 5, 7, 9]);
    assert_eq!(pipe.counters().dropped(DropReason::FlowRemoved), 5);
    assert_eq!(pipe.queue_len(FlowId(1)), Some((0, 0)));
    assert_conserved(&pipe);
    pipe.add_flow(FlowId(1), FlowParams::weighted(2)).unwrap();
    pipe.enqueue(at(1), Packet::new(FlowId(1), 500, 99))
        .unwrap();
    assert_conserved(&pipe);
    assert!(pipe.add_flow(FlowId(7), FlowParams::default()).is_err());
}

#[test]
fn steady_state_allocates_nothing() {
    let mut sched = SchedulerConfig::new(AlgKind::Drr);
    sched.capacity = 4_096;
    let s = sched.build(FlowTable::uniform(8).unwrap()).unwrap();
    let mut cfg = everything(5);
    cfg.delay_line_capacity = 8_192;
    let mut pipe = Pipe::new(cfg, s, 8).unwrap();
    let mut rng = fastrand::Rng::with_seed(9);
    let mut now = 0u64;
    let mut step = |pipe: &mut Pipe<_>, n: usize| {
        let mut exits = 0u64;
        for i in 0..n {
            now += rng.u64(0..120_000);
            let pkt = Packet::new(FlowId(rng.u32(0..8)), rng.u32(64..=1500), i as u64);
            let _ = pipe.enqueue(at(now), pkt);
            pipe.release(at(now), &mut |_| exits += 1);
        }
        exits
    };
    assert!(step(&mut pipe, 50_000) > 0); // warm-up
    let info = allocation_counter::measure(|| {
        std::hint::black_box(step(&mut pipe, 50_000));
    });
    assert_eq!(info.count_total, 0, "{} allocations", info.count_total);
    assert_conserved(&pipe);
    let _ = pipe.scheduler().name();
}

#[test]
fn a_shaping_scheduler_sets_the_pace_and_poll_at_follows_it() {
    // shaped-drr at 8 Mbit/s (1 µs per byte) behind a 1 Gbit/s link.
    let mut sched = SchedulerConfig::new(AlgKind::ShapedDrr);
    sched.capacity = 64;
    sched.eiffel.rate_bps = 8_000_000;
    let s = sched.build(FlowTable::uniform(1).unwrap()).unwrap();
    let cfg = PipeConfig {
        bw: Some(rate(1_000_000_000)),
        delay_ns: 100_000,
        ..PipeConfig::default()
    };
    let mut pipe = Pipe::new(cfg, s, 1).unwrap();
    let arr: Vec<_> = (0..20)
        .map(|i| (at(0), Packet::new(FlowId(0), 1_000, i)))
        .collect();
    let run = drive(&mut pipe, &arr);
    let t = exit_times(&run);
    assert_eq!(t.len(), 20);
    // The shaper releases one 1000 B packet per ms (at most one granularity,
    // 1024 ns, early); the link adds 8 µs and the delay 100 µs.
    for (i, w) in t.windows(2).enumerate() {
        let gap = w[1] - w[0];
        assert!((MS - 1_024..=MS + 1_024).contains(&gap), "gap {i}: {gap}");
    }
    assert!(t[19] - t[0] >= 19 * MS - 1_024);
    // The driver woke only at poll_at times: every exit handed out on time.
    assert!(run.exits.iter().all(|(now, e)| *now == e.at));
}

#[test]
fn exits_do_not_depend_on_when_release_is_called() {
    // Same arrivals and seed; one caller wakes exactly at poll_at, the other
    // also at random instants and late. Exit times, order and fates agree
    // (the delay line never fills, so the link never waits for a release).
    let arr = arrivals(6, 5_000, 4, 150_000);
    let build = || {
        let mut sched = SchedulerConfig::new(AlgKind::Wf2qPlus);
        sched.capacity = 4_096;
        let s = sched.build(FlowTable::uniform(4).unwrap()).unwrap();
        let mut cfg = everything(8);
        cfg.delay_line_capacity = 100_000;
        Pipe::new(cfg, s, 4).unwrap()
    };
    let mut exact = build();
    let reference: Vec<_> = drive(&mut exact, &arr)
        .exits
        .into_iter()
        .map(|(_, e)| e)
        .collect();

    let mut pipe = build();
    let mut rng = fastrand::Rng::with_seed(3);
    let mut got = Vec::new();
    let mut now = 0u64;
    for (a, p) in &arr {
        // Release at a few random instants before the arrival, never at poll_at.
        while now + 1 < a.as_nanos() && rng.u8(0..4) != 0 {
            now = rng.u64(now + 1..a.as_nanos());
            pipe.release(at(now), &mut |e| got.push(e));
        }
        now = a.as_nanos();
        let _ = pipe.enqueue(*a, *p);
        assert_conserved(&pipe);
    }
    while let Some(t) = pipe.poll_at() {
        now = now.max(t.as_nanos()) + rng.u64(0..50_000); // late
        pipe.release(at(now), &mut |e| got.push(e));
    }
    assert_eq!(got.len(), reference.len());
    assert_eq!(got, reference);
}

/// A FIFO pipe at 8 Mbit/s (1 µs a byte) with a 10 ms delay and
/// tc-netem's reordering.
fn netem_reorder_pipe(probability: f64, gap: u32) -> Pipe<pspat_sched::Fifo> {
    let cfg = PipeConfig {
        bw: Some(rate(8_000_000)),
        delay_ns: 10 * MS,
        reorder: true,
        netem_reorder: Some(NetemReorder {
            probability,
            gap,
            correlation: 0.0,
        }),
        queue: QueueConfig {
            limit: QueueLimit::Slots(100_000),
            ..QueueConfig::default()
        },
        delay_line_capacity: 100_000,
        seed: 3,
        ..PipeConfig::default()
    };
    fifo_pipe(cfg, 1, 100_000)
}

/// `n` 100-byte packets (100 µs on the link), one every `gap_ns`.
fn even_arrivals(n: u64, gap_ns: u64) -> Vec<(Instant, Packet)> {
    (0..n)
        .map(|i| (at(i * gap_ns), Packet::new(FlowId(0), 100, i)))
        .collect()
}

#[test]
fn netem_reorder_sends_every_gap_th_packet_ahead_of_the_delay() {
    // Probability 1, gap 5: packets 4, 9, 14... leave as they leave the
    // link (100 µs after they arrive, the link idle), the others 10 ms
    // later, as tc-netem's `reorder 100% gap 5`.
    let mut pipe = netem_reorder_pipe(1.0, 5);
    let arr = even_arrivals(50, 1_000_000);
    let run = drive(&mut pipe, &arr);
    assert!(run.rejected.is_empty());
    let mut exits: Vec<(u64, u64)> = run
        .with_fate(Fate::Transmit)
        .map(|e| (e.packet.token, e.at.as_nanos()))
        .collect();
    exits.sort_unstable();
    for (token, exit) in exits {
        let finish = token * 1_000_000 + 100_000;
        let want = if token % 5 == 4 {
            finish
        } else {
            finish + 10 * MS
        };
        assert_eq!(exit, want, "packet {token}");
    }
    assert_eq!(pipe.counters().reordered, 10);
    assert_conserved(&pipe);
}

#[test]
fn netem_reorder_draws_within_the_binomial_interval_and_overtakes() {
    let n = 20_000;
    let mut pipe = netem_reorder_pipe(0.25, 1);
    // A packet every 200 µs: a packet sent ahead overtakes the ~50 still
    // in the 10 ms delay.
    let arr = even_arrivals(n, 200_000);
    let run = drive(&mut pipe, &arr);
    assert!(run.rejected.is_empty());
    let reordered = pipe.counters().reordered;
    crate::pipe_common::assert_binomial("reorder 0.25", reordered, n, 0.25);
    let tokens: Vec<u64> = run
        .with_fate(Fate::Transmit)
        .map(|e| e.packet.token)
        .collect();
    assert_eq!(tokens.len() as u64, n);
    let overtaken = tokens.windows(2).filter(|w| w[1] < w[0]).count();
    assert!(overtaken > 1_000, "{overtaken} inversions");
    // With probability 0 nothing is sent ahead and order is kept.
    let mut pipe = netem_reorder_pipe(0.0, 1);
    let run = drive(&mut pipe, &even_arrivals(2_000, 200_000));
    let tokens: Vec<u64> = run
        .with_fate(Fate::Transmit)
        .map(|e| e.packet.token)
        .collect();
    assert_eq!(tokens, (0..2_000).collect::<Vec<_>>());
    assert_eq!(pipe.counters().reordered, 0);
}

#[test]
fn netem_reorder_needs_a_reordering_line_and_a_gap_of_one_or_more() {
    let base = PipeConfig {
        reorder: true,
        netem_reorder: Some(NetemReorder {
            probability: 0.5,
            gap: 1,
            correlation: 0.0,
        }),
        ..PipeConfig::default()
    };
    assert!(base.validate().is_ok());
    let e = PipeConfig {
        reorder: false,
        ..base.clone()
    }
    .validate()
    .unwrap_err();
    assert!(e.to_string().contains("reorder"), "{e}");
    for r in [
        NetemReorder {
            probability: 1.5,
            gap: 1,
            correlation: 0.0,
        },
        NetemReorder {
            probability: 0.5,
            gap: 0,
            correlation: 0.0,
        },
    ] {
        let c = PipeConfig {
            netem_reorder: Some(r),
            ..base.clone()
        };
        assert!(c.validate().is_err(), "{r:?}");
    }
}
