// Per-queue counters of a pipe ([`FlowCounters`]) in virtual time: every
// queue conserves its packets (`in = out + dropped + held`) after every
// call, the queues add up to the pipe, and a queue's length is what its
// limit sees.

use pspat_sched::pipe::{DelayProfile, Pipe, PipeConfig, QueueConfig, QueueLimit};
use pspat_sched::rate::Rate;
use pspat_sched::{
    AlgKind, AnyScheduler, FlowCounters, FlowId, FlowTable, Instant, Packet, SchedulerConfig,
};

fn pipe(alg: AlgKind, flows: usize, cfg: PipeConfig) -> Pipe<AnyScheduler> {
    let sched = SchedulerConfig::new(alg)
        .build(FlowTable::uniform(flows).unwrap())
        .unwrap();
    Pipe::new(cfg, sched, flows).unwrap()
}

/// Checks every queue and the sums against the pipe's counters.
fn check(p: &Pipe<AnyScheduler>, flows: usize) {
    let mut sum = FlowCounters::default();
    let mut held = 0;
    for f in 0..flows {
        let c = *p.flow_counters(FlowId(f as u32)).unwrap();
        let (slots, _) = p.queue_len(FlowId(f as u32)).unwrap();
        assert!(
            c.in_packets >= c.out_packets + c.dropped_packets,
            "flow {f}: {c:?}"
        );
        assert!(c.held() >= slots, "flow {f}: {c:?}, {slots} queued");
        held += c.held();
        sum.in_packets += c.in_packets;
        sum.in_bytes += c.in_bytes;
        sum.out_packets += c.out_packets;
        sum.out_bytes += c.out_bytes;
        sum.dropped_packets += c.dropped_packets;
    }
    let pc = p.counters();
    assert_eq!(
        (sum.in_packets, sum.in_bytes, sum.out_packets, sum.out_bytes),
        (pc.in_packets, pc.in_bytes, pc.out_packets, pc.out_bytes)
    );
    assert_eq!(sum.dropped_packets, pc.dropped_total());
    assert_eq!(held, p.held());
}

/// A small deterministic generator (xorshift).
fn next(x: &mut u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x
}

fn run_mixed(alg: AlgKind) {
    const FLOWS: usize = 5;
    let cfg = PipeConfig {
        // 8 Mbit/s: a 1000-byte packet takes 1 ms.
        bw: Some(Rate::checked("bw", 8_000_000).unwrap()),
        delay_ns: 3_000_000,
        queue: QueueConfig {
            limit: QueueLimit::Slots(6),
            ..QueueConfig::default()
        },
        seed: 7,
        ..PipeConfig::default()
    };
    let mut p = pipe(alg, FLOWS, cfg);
    // Flow 1 loses 20% at random; flow 3 has a byte limit.
    p.set_queue(
        FlowId(1),
        QueueConfig {
            plr: 0.2,
            limit: QueueLimit::Slots(6),
            ..QueueConfig::default()
        },
    )
    .unwrap();
    p.set_queue(
        FlowId(3),
        QueueConfig {
            limit: QueueLimit::Bytes(3000),
            ..QueueConfig::default()
        },
    )
    .unwrap();
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let mut now = Instant::ZERO;
    let mut out = 0u64;
    let mut refused = 0u64;
    for token in 0..4000u64 {
        now = now.saturating_add_nanos(next(&mut x) % 400_000);
        p.release(now, &mut |_| out += 1);
        check(&p, FLOWS);
        // Flow 0 sends a third of the packets; the others share the rest.
        let f = if next(&mut x).is_multiple_of(3) {
            0
        } else {
            1 + next(&mut x) % 4
        };
        let len = 200 + (next(&mut x) % 1300) as u32;
        if p.enqueue(now, Packet::new(FlowId(f as u32), len, token))
            .is_err()
        {
            refused += 1;
        }
        check(&p, FLOWS);
        // What the limit sees is the queue's length.
        assert!(p.queue_len(FlowId(3)).unwrap().1 <= 3000);
        assert!(p.queue_len(FlowId(0)).unwrap().0 <= 6);
    }
    // A packet of a flow the pipe does not have is in no queue.
    assert!(p.enqueue(now, Packet::new(FlowId(99), 100, 0)).is_err());
    refused += 1;
    let c = p.counters();
    let unknown = c.dropped(pspat_sched::DropReason::UnknownFlow);
    assert_eq!(unknown, 1);
    while let Some(t) = p.poll_at() {
        now = now.max(t);
        p.release(now, &mut |_| out += 1);
    }
    assert!(refused > 0 && out > 0);
    let mut total_in = 0;
    for f in 0..FLOWS {
        let c = *p.flow_counters(FlowId(f as u32)).unwrap();
        assert_eq!(c.held(), 0, "flow {f}");
        assert_eq!(p.queue_len(FlowId(f as u32)), Some((0, 0)));
        assert_eq!(c.in_packets, c.out_packets + c.dropped_packets);
        assert!(c.in_packets > 0);
        total_in += c.in_packets;
    }
    // Every packet offered to a known flow is in exactly one queue.
    assert_eq!(total_in + 1, p.counters().in_packets);
    // Flow 1 lost at random, the others only at their limits.
    assert!(p.counters().dropped(pspat_sched::DropReason::RandomLoss) > 0);
    assert_eq!(out, p.counters().out_packets);
}

#[test]
fn every_queue_conserves_its_packets_under_fifo_drr_and_qfq() {
    run_mixed(AlgKind::Fifo);
    run_mixed(AlgKind::Drr);
    run_mixed(AlgKind::Qfq);
}

#[test]
fn late_drops_and_a_purge_are_counted_in_their_queue() {
    // Every packet is lost after the link (profile loss level 0).
    let cfg = PipeConfig {
        profile: Some(DelayProfile::new(vec![1_000, 2_000], 0.0).unwrap()),
        ..PipeConfig::default()
    };
    let mut p = pipe(AlgKind::Drr, 2, cfg);
    for i in 0..4 {
        p.enqueue(Instant::ZERO, Packet::new(FlowId(i % 2), 100, u64::from(i)))
            .unwrap();
    }
    check(&p, 2);
    let mut dropped = 0;
    p.release(Instant::from_nanos(1_000_000), &mut |e| {
        if matches!(e.fate, pspat_sched::Fate::Dropped(_)) {
            dropped += 1;
        }
    });
    assert_eq!(dropped, 4);
    check(&p, 2);
    for f in 0..2 {
        let c = p.flow_counters(FlowId(f)).unwrap();
        assert_eq!((c.in_packets, c.dropped_packets, c.out_packets), (2, 2, 0));
    }
    // A rate-limited pipe taken out of service: its queued packets are
    // dropped in their queues.
    let cfg = PipeConfig {
        bw: Some(Rate::checked("bw", 8_000_000).unwrap()),
        ..PipeConfig::default()
    };
    let mut p = pipe(AlgKind::Fifo, 3, cfg);
    for i in 0..9u32 {
        p.enqueue(
            Instant::ZERO,
            Packet::new(FlowId(i % 3), 1000, u64::from(i)),
        )
        .unwrap();
    }
    assert_eq!(p.queue_len(FlowId(2)).map(|q| q.0), Some(3));
    let mut purged = 0;
    p.purge(Instant::from_nanos(10), &mut |_| purged += 1);
    assert_eq!(purged, 9);
    check(&p, 3);
    for f in 0..3 {
        let c = p.flow_counters(FlowId(f)).unwrap();
        assert_eq!((c.in_packets, c.dropped_packets, c.held()), (3, 3, 0));
    }
}

#[test]
fn queue_configurations_are_shared_and_per_flow_state_stays_small() {
    let mut p = pipe(AlgKind::Fifo, 1000, PipeConfig::default());
    let a = QueueConfig {
        limit: QueueLimit::Slots(10),
        ..QueueConfig::default()
    };
    let b = QueueConfig {
        plr: 0.5,
        ..QueueConfig::default()
    };
    for f in 0..1000 {
        p.set_queue(FlowId(f), if f % 2 == 0 { a } else { b })
            .unwrap();
    }
    assert_eq!(p.queue_config(FlowId(10)), Some(&a));
    assert_eq!(p.queue_config(FlowId(11)), Some(&b));
    assert!(p.set_queue(FlowId(1000), a).is_err());
    // Changing every flow back and forth reuses the unused entries.
    for round in 0..50u32 {
        let c = QueueConfig {
            limit: QueueLimit::Slots(round + 1),
            ..QueueConfig::default()
        };
        for f in 0..1000 {
            p.set_queue(FlowId(f), c).unwrap();
        }
        assert_eq!(p.queue_config(FlowId(999)), Some(&c));
    }
    // Queue length, configuration index and counters: the pipe's share of
    // the memory of a dynamic queue (docs/RUN.md, Memory). Neither plr nor
    // a slot limit needs the side table of RED and Gilbert-Elliott state.
    let per_flow = Pipe::<AnyScheduler>::PER_FLOW_BYTES;
    let filter = Pipe::<AnyScheduler>::PER_FLOW_FILTER_BYTES;
    println!(
        "pipe per-flow bytes: {per_flow}, {filter} more with RED or Gilbert-Elliott \
         (a queue configuration, {} B, is shared by index)",
        std::mem::size_of::<QueueConfig>()
    );
    assert!(per_flow <= 56, "{per_flow}");
    assert!(filter <= 40, "{filter}");
    assert_eq!(p.per_flow_bytes(), per_flow);
    // The first queue with RED brings the side table, for every queue.
    let red = QueueConfig {
        red: Some(pspat_sched::pipe::Red {
            gentle: false,
            w_q: 0.1,
            min_th: 2,
            max_th: 5,
            max_p: 0.1,
        }),
        ..QueueConfig::default()
    };
    p.set_queue(FlowId(7), red).unwrap();
    assert_eq!(p.per_flow_bytes(), per_flow + filter);
    assert_eq!(p.queue_config(FlowId(7)), Some(&red));
    assert_eq!(p.red_average(FlowId(7)), Some(0.0));
}

/// Ten 1000-byte packets, flows 0 and 1 in turn, into a 2-flow DRR pipe
/// of `cfg` at time 0, handed over at 2.5 ms with old flow 1 becoming new
/// flow 2 and old flow 0 given no place: the time, what moved and what was
/// dropped.
fn ten_handed_over(
    cfg: PipeConfig,
) -> (
    Instant,
    Vec<pspat_sched::pipe::Moved>,
    Vec<pspat_sched::Rejected>,
) {
    let mut old = pipe(AlgKind::Drr, 2, cfg);
    for i in 0..10u32 {
        old.enqueue(
            Instant::ZERO,
            Packet::new(FlowId(i % 2), 1000, u64::from(i)),
        )
        .unwrap();
    }
    let now = Instant::from_nanos(2_500_000);
    old.release(now, &mut |_| {});
    let (mut moved, mut dropped) = (Vec::new(), Vec::new());
    old.hand_over(
        now,
        &|f| (f.0 == 1).then_some(FlowId(2)),
        &mut |m| moved.push(m),
        &mut |r| dropped.push(r),
    );
    (now, moved, dropped)
}

#[test]
fn copies_in_the_delay_line_go_with_their_originals_and_count_nowhere() {
    use pspat_sched::pipe::{Fate, Moved};
    // Every packet duplicated; a 2 ms delay holds the first ones in the
    // line with their copies when the pipe is replaced.
    let cfg = || PipeConfig {
        bw: Some(Rate::checked("bw", 8_000_000).unwrap()),
        delay_ns: 2_000_000,
        delay_line_capacity: 64,
        queue: QueueConfig {
            duplicate: 1.0,
            ..QueueConfig::default()
        },
        ..PipeConfig::default()
    };
    let (now, moved, dropped) = ten_handed_over(cfg());
    let copies: Vec<_> = moved
        .iter()
        .enumerate()
        .filter_map(|(i, m)| match m {
            Moved::Copy { exit, packet } => Some((i, *exit, *packet)),
            _ => None,
        })
        .collect();
    assert!(!copies.is_empty(), "{moved:?}");
    for &(i, exit, packet) in &copies {
        // Right behind its original, with its new flow and exit time.
        assert_eq!(moved[i - 1], Moved::InFlight { exit, packet }, "{moved:?}");
        assert_eq!(packet.flow, FlowId(2));
    }
    // A dropped packet's copy is neither moved nor dropped: ten packets.
    assert_eq!(moved.len() - copies.len() + dropped.len(), 10);
    assert!(dropped.iter().all(|r| r.packet.flow == FlowId(0)));
    let mut new = pipe(AlgKind::Drr, 3, cfg());
    for m in moved {
        new.adopt(now, m).unwrap();
    }
    check(&new, 3);
    let mut exits = Vec::new();
    let mut t = now;
    while let Some(e) = new.poll_at() {
        t = t.max(e);
        new.release(t, &mut |e| exits.push(e));
        check(&new, 3);
    }
    let c = *new.flow_counters(FlowId(2)).unwrap();
    assert_eq!((c.in_packets, c.out_packets, c.held()), (5, 5, 0));
    // The moved copies leave right behind their originals; the five queued
    // packets get copies of the new pipe's own.
    let dups = exits.iter().filter(|e| e.fate == Fate::Duplicate).count();
    assert_eq!(dups, 5, "{exits:?}");
    for (i, e) in exits.iter().enumerate() {
        if e.fate == Fate::Duplicate {
            assert_eq!((exits[i - 1].packet, exits[i - 1].at), (e.packet, e.at));
        }
    }
}

#[test]
fn packets_handed_over_to_a_new_pipe_are_counted_in_their_new_queues() {
    let cfg = || PipeConfig {
        bw: Some(Rate::checked("bw", 8_000_000).unwrap()),
        delay_ns: 2_000_000,
        ..PipeConfig::default()
    };
    // At 2.5 ms: two packets in the delay line, one on the link, seven queued.
    let (now, moved, dropped) = ten_handed_over(cfg());
    assert_eq!(moved.len() + dropped.len(), 10);
    let mut new = pipe(AlgKind::Drr, 3, cfg());
    for m in moved {
        new.adopt(now, m).unwrap();
    }
    check(&new, 3);
    let c = *new.flow_counters(FlowId(2)).unwrap();
    assert_eq!(c.in_packets, 5);
    let mut out = 0;
    let mut t = now;
    while let Some(e) = new.poll_at() {
        t = t.max(e);
        new.release(t, &mut |_| out += 1);
        check(&new, 3);
    }
    let c = *new.flow_counters(FlowId(2)).unwrap();
    assert_eq!((c.in_packets, c.out_packets, c.held()), (5, 5, 0));
    assert_eq!(out, 5);
}
