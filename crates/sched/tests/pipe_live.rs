//! Live changes in virtual time: a new seed continues each random stream
//! from its position; a link rebuilt with other instances (a mask changed)
//! hands every packet over, in order per flow, with in-flight packets
//! keeping their exit times.

use pspat_sched::pipe::{Jitter, JitterDistribution, PipeConfig, QueueConfig};
use pspat_sched::rate::Rate;
use pspat_sched::{
    AlgKind, AnyScheduler, DropReason, Fifo, FlowId, FlowTable, Instant, Packet, Pipe, PipeSet,
    Rejected, Scheduler, SchedulerConfig,
};

use crate::pipe_common::drive;

const MS: u64 = 1_000_000;

fn lossy_jittery(seed: u64, plr: f64, jitter: bool) -> Pipe<Fifo> {
    let cfg = PipeConfig {
        bw: Some(Rate::checked("bw", 80_000_000u64).unwrap()),
        delay_ns: 5 * MS,
        jitter: jitter.then_some(Jitter {
            ns: MS,
            distribution: JitterDistribution::Uniform,
        }),
        queue: QueueConfig {
            plr,
            ..QueueConfig::default()
        },
        seed,
        ..PipeConfig::default()
    };
    Pipe::new(
        cfg,
        Fifo::new(FlowTable::uniform(1).unwrap(), 64).unwrap(),
        1,
    )
    .unwrap()
}

/// One packet every 20 ms from `from` (the pipe empties in between):
/// each packet's fate and delay depend only on its draws.
fn spaced(from: u64, n: u64) -> Vec<(Instant, Packet)> {
    (0..n)
        .map(|i| {
            (
                Instant::from_nanos((from + i) * 20 * MS),
                Packet::new(FlowId(0), 1000, from + i),
            )
        })
        .collect()
}

/// `(token, Some(delay ns) or None when refused)` for every packet.
fn outcomes(
    run: &crate::pipe_common::Run,
    arrivals: &[(Instant, Packet)],
) -> Vec<(u64, Option<u64>)> {
    arrivals
        .iter()
        .map(|(at, p)| {
            let exit = run
                .exits
                .iter()
                .find(|(_, e)| e.packet.token == p.token)
                .map(|(_, e)| e.at.as_nanos() - at.as_nanos());
            (p.token, exit)
        })
        .collect()
}

#[test]
fn a_new_seed_continues_each_stream_from_its_position() {
    // Loss alone (one loss draw per arrival) and jitter alone (one jitter
    // draw per packet sent): after 40 packets, a pipe reseeded from 1 to 2
    // makes exactly the draws of a pipe started with 2.
    for (plr, jitter) in [(0.5, false), (0.0, true)] {
        let first = spaced(0, 40);
        let then = spaced(40, 60);
        let mut changed = lossy_jittery(1, plr, jitter);
        let mut native = lossy_jittery(2, plr, jitter);
        let a = outcomes(&drive(&mut changed, &first), &first);
        let b = outcomes(&drive(&mut native, &first), &first);
        assert_ne!(a, b, "the two seeds differ before the change");
        changed.reseed(2);
        assert_eq!(changed.seed(), 2);
        let a = outcomes(&drive(&mut changed, &then), &then);
        let b = outcomes(&drive(&mut native, &then), &then);
        assert_eq!(a, b, "plr {plr} jitter {jitter}");
        // The draws are random: both fates (or several delays) occur.
        let kinds: std::collections::BTreeSet<Option<u64>> = a.iter().map(|x| x.1).collect();
        assert!(kinds.len() > 1, "{kinds:?}");
        // Reseeding to the seed in force changes nothing.
        let mut same = lossy_jittery(2, plr, jitter);
        let mut other = lossy_jittery(2, plr, jitter);
        drive(&mut same, &first);
        drive(&mut other, &first);
        same.reseed(2);
        assert_eq!(
            outcomes(&drive(&mut same, &then), &then),
            outcomes(&drive(&mut other, &then), &then)
        );
    }
}

/// A pipe of `cfg` around `alg` over `flows` flows of weight 1.
fn pipe_of(alg: AlgKind, flows: usize, cfg: PipeConfig) -> Pipe<AnyScheduler> {
    let sched = SchedulerConfig::new(alg)
        .build(FlowTable::uniform(flows).unwrap())
        .unwrap();
    Pipe::new(cfg, sched, flows).unwrap()
}

/// A DRR pipe of `flows` flows: 8 Mbit/s (1000 B take 1 ms), 10 ms.
fn drr(flows: usize) -> Pipe<AnyScheduler> {
    let cfg = PipeConfig {
        bw: Some(Rate::checked("bw", 8_000_000u64).unwrap()),
        delay_ns: 10 * MS,
        ..PipeConfig::default()
    };
    pipe_of(AlgKind::Drr, flows, cfg)
}

/// Drives the set as an arbiter: everything due, late drops, next time.
fn drain(set: &mut PipeSet<AnyScheduler>, mut now: Instant) -> (Vec<(u64, Packet)>, Vec<Rejected>) {
    let mut out = Vec::new();
    let mut late = Vec::new();
    for _ in 0..100_000 {
        while let Some(p) = set.dequeue(now) {
            out.push((now.as_nanos(), p));
        }
        set.take_late_drops(&mut |r| late.push(r));
        match set.next_eligible(now) {
            Some(t) if t > now => now = t,
            Some(_) => {}
            None => break,
        }
    }
    (out, late)
}

/// The tokens of `out` whose token / 100 is `flow` (a flow's identity
/// across the change), in exit order.
fn flow_tokens(out: &[(u64, Packet)], flow: u64) -> Vec<u64> {
    out.iter()
        .map(|(_, p)| p.token)
        .filter(|t| t / 100 == flow)
        .collect()
}

#[test]
fn instances_merged_by_a_coarser_mask_keep_every_packet_its_order_and_its_exit() {
    // Link 2 with two instances (ids 0..4 and 4..8), 8 spare ids.
    let mut set = PipeSet::new();
    set.push(2, 0, drr(4), 4).unwrap();
    set.push(2, 1, drr(4), 4).unwrap();
    set.reserve(8).unwrap();
    // Four flows, four packets each: A and B on instance 0 (flows 0, 1),
    // C and D on instance 1 (flows 0, 2). Token = flow * 100 + sequence.
    let flows = [(1u64, 0u32, 0u32), (2, 0, 1), (3, 1, 0), (4, 1, 2)];
    for seq in 0..4 {
        for (name, inst, flow) in flows {
            let g = set.global(2, inst, FlowId(flow)).unwrap();
            set.enqueue(Instant::ZERO, Packet::new(g, 1000, name * 100 + seq))
                .unwrap();
        }
    }
    // At 2.5 ms each instance has two packets in the delay line (exits 11
    // and 12 ms), one on its link (ends at 3 ms, exit 13 ms), five queued.
    let now = Instant::from_nanos(2_500_000);
    assert_eq!(set.dequeue(now), None);
    // The new mask merges the instances: one instance, C joins B's queue
    // (a coarser flow mask), D goes to flow 3.
    let moves = |inst: u32, f: FlowId| -> Option<(u32, FlowId)> {
        Some((
            0,
            FlowId(match (inst, f.0) {
                (0, x) => x,
                (1, 0) => 1,
                (1, 2) => 3,
                _ => return None,
            }),
        ))
    };
    let gone = set
        .replace_link_moving(2, now, vec![(0, 8, drr(4), 4)], &moves)
        .unwrap();
    assert_eq!(gone.len(), 2);
    for (_, c) in &gone {
        assert_eq!((c.in_packets, c.dropped_total()), (0, 0), "{c:?}");
    }
    assert_eq!(set.queued(), 16);
    let (out, late) = drain(&mut set, now);
    assert!(late.is_empty(), "{late:?}");
    assert_eq!(out.len(), 16);
    // In flight: both instances' exits kept (11, 11, 12, 12, 13, 13 ms);
    // then the one link sends a packet a ms from 3 ms on: 14 .. 23 ms.
    let times: Vec<u64> = out.iter().map(|(t, _)| *t / MS).collect();
    assert_eq!(
        times,
        [11, 11, 12, 12, 13, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23]
    );
    for name in 1..=4 {
        let t = flow_tokens(&out, name);
        assert_eq!(
            t,
            (0..4).map(|s| name * 100 + s).collect::<Vec<_>>(),
            "flow {name}"
        );
    }
    // Their new ids: A 8, B and C 9, D 11.
    let id_of = |name: u64| {
        out.iter()
            .filter(|(_, p)| p.token / 100 == name)
            .map(|(_, p)| p.flow.0)
            .collect::<std::collections::BTreeSet<u32>>()
    };
    assert_eq!(
        [id_of(1), id_of(2), id_of(3), id_of(4)].map(|s| s.into_iter().collect::<Vec<_>>()),
        [vec![8], vec![9], vec![9], vec![11]]
    );
    // A frame routed before the change to old instance 1, flow 2 (global
    // 6): it goes where D went.
    set.enqueue(now, Packet::new(FlowId(6), 1000, 499)).unwrap();
    let (out, _) = drain(&mut set, now);
    assert_eq!(
        out.iter()
            .map(|(_, p)| (p.flow, p.token))
            .collect::<Vec<_>>(),
        [(FlowId(11), 499)]
    );
}

#[test]
fn an_instance_split_by_a_finer_mask_and_a_flow_with_no_place() {
    let mut set = PipeSet::new();
    set.push(3, 0, drr(3), 3).unwrap();
    set.reserve(6).unwrap();
    for seq in 0..5 {
        for flow in 0..3u32 {
            set.enqueue(
                Instant::ZERO,
                Packet::new(FlowId(flow), 1000, u64::from(flow + 1) * 100 + seq),
            )
            .unwrap();
        }
    }
    let now = Instant::from_nanos(1_500_000);
    assert_eq!(set.dequeue(now), None);
    // Two instances now: flow 0 stays on instance 0, flow 1 goes to
    // instance 1, flow 2 has no place (its flowset is gone).
    let moves = |_: u32, f: FlowId| match f.0 {
        0 => Some((0, FlowId(0))),
        1 => Some((1, FlowId(0))),
        _ => None,
    };
    let gone = set
        .replace_link_moving(3, now, vec![(0, 3, drr(1), 1), (1, 4, drr(1), 1)], &moves)
        .unwrap();
    let c = gone[0].1;
    let (out, late) = drain(&mut set, now);
    // Every packet: out, or dropped as flow_removed (counted in the old
    // pipe's counters and handed to the late drops).
    assert_eq!(out.len() + late.len(), 15);
    assert_eq!(c.dropped(DropReason::FlowRemoved), late.len() as u64);
    assert!(late
        .iter()
        .all(|r| r.reason == DropReason::FlowRemoved && r.packet.token / 100 == 3));
    assert_eq!(set.queued(), 0);
    for name in [1, 2] {
        let t = flow_tokens(&out, name);
        assert!(t.windows(2).all(|w| w[0] < w[1]), "flow {name}: {t:?}");
        assert_eq!(t.len(), 5, "flow {name}");
    }
    // Both new instances start after the old link's packet in progress
    // (ends at 2 ms): their first queued packets exit at 13 ms, together.
    let first_queued: Vec<u64> = out
        .iter()
        .filter(|(t, _)| *t >= 13 * MS)
        .take(2)
        .map(|(t, _)| *t)
        .collect();
    assert_eq!(first_queued, [13 * MS, 13 * MS], "{out:?}");
    // Replacing with the plain id map still works (no instance moves).
    let gone = set
        .replace_link(3, now, vec![(0, 0, drr(1), 1), (1, 1, drr(1), 1)], &Some)
        .unwrap();
    assert_eq!(gone.len(), 2);
}

/// A pipe of `flows` flows under `alg`: 8 Mbit/s (1000 B take 1 ms),
/// 1 ms delay, so a packet that starts at `k` ms leaves at `k + 2` ms.
fn short(alg: AlgKind, flows: usize) -> Pipe<AnyScheduler> {
    let cfg = PipeConfig {
        bw: Some(Rate::checked("bw", 8_000_000u64).unwrap()),
        delay_ns: MS,
        ..PipeConfig::default()
    };
    pipe_of(alg, flows, cfg)
}

/// Drives the set as an arbiter up to `until` (what is due by then).
fn drain_until(set: &mut PipeSet<AnyScheduler>, until: Instant, out: &mut Vec<(u64, Packet)>) {
    drain_between(set, Instant::ZERO, until, out);
}

/// Everything due from `from` up to `until`, as an arbiter would see it.
fn drain_between(
    set: &mut PipeSet<AnyScheduler>,
    from: Instant,
    until: Instant,
    out: &mut Vec<(u64, Packet)>,
) {
    let mut now = from;
    for _ in 0..100_000 {
        while let Some(p) = set.dequeue(now) {
            out.push((now.as_nanos(), p));
        }
        match set.next_eligible(now) {
            Some(t) if t > now && t <= until => now = t,
            _ => break,
        }
    }
}

/// Where each packet of a flow (token / 100) left, in exit order: the
/// flow's sequence numbers (token % 100).
fn sequences(out: &[(u64, Packet)], flow: u64) -> Vec<u64> {
    flow_tokens(out, flow).iter().map(|t| t % 100).collect()
}

/// Packets of three sources (tokens 100.., 200.., 300..; `seqs` each,
/// interleaved) in the one queue of link `link` (one instance, base 0),
/// then run to 4.5 ms: three have left (2, 3, 4 ms), one is in the delay
/// line (exit 5 ms), one on the link (ends at 5 ms, exit 6 ms), the rest
/// queued.
fn mixed_queue(alg: AlgKind, link: u32, seqs: u64) -> (PipeSet<AnyScheduler>, Vec<(u64, Packet)>) {
    let mut set = PipeSet::new();
    set.push(link, 0, short(alg, 1), 1).unwrap();
    set.reserve(3).unwrap();
    for seq in 0..seqs {
        for name in 1..=3u64 {
            set.enqueue(
                Instant::ZERO,
                Packet::new(FlowId(0), 1000, name * 100 + seq),
            )
            .unwrap();
        }
    }
    let mut out = Vec::new();
    drain_until(&mut set, Instant::from_nanos(4_500_000), &mut out);
    assert_eq!(out.len(), 3, "{out:?}");
    (set, out)
}

#[test]
fn a_finer_flowset_mask_splits_a_mixed_queue_packet_by_packet() {
    // One unmasked flowset (one queue, flow 0) holds sources 1, 2, 3
    // mixed; the new mask keeps the source: source 1 (the bits it adds at
    // zero) is flow 0, the old queue's heir; 2 is flow 1, 3 is flow 2.
    // Then each source sends 4 more packets to its own new queue. Under
    // DRR, moving the old queue whole lets sources 2 and 3's next packets
    // leave before their carried ones; splitting it keeps every order.
    let now = Instant::from_nanos(4_500_000);
    let whole = |_: u32, _: FlowId| Some((0, FlowId(0)));
    let own = |_: u32, _: FlowId, p: &Packet| Some((0, FlowId((p.token / 100 - 1) as u32)));
    for split in [false, true] {
        let (mut set, mut out) = mixed_queue(AlgKind::Drr, 5, 5);
        let new = vec![(0, 1, short(AlgKind::Drr, 3), 3)];
        let gone = if split {
            set.replace_link_splitting(5, now, new, &whole, &mut { own })
                .unwrap()
        } else {
            set.replace_link_moving(5, now, new, &whole).unwrap()
        };
        // The old pipe kept only what left before the change.
        assert_eq!(gone[0].1.in_packets, 3, "{gone:?}");
        assert_eq!(set.queued(), 12);
        for seq in 5..9 {
            for name in 1..=3u64 {
                set.enqueue(
                    now,
                    Packet::new(FlowId(name as u32), 1000, name * 100 + seq),
                )
                .unwrap();
            }
        }
        let (after, late) = drain(&mut set, now);
        assert!(late.is_empty(), "{late:?}");
        assert_eq!(after.len(), 24);
        // In flight before the change: exits kept (5 and 6 ms), then one
        // packet a ms from the end of the transmission in progress.
        let times: Vec<u64> = after.iter().map(|(t, _)| *t / MS).collect();
        assert_eq!(times, (5..29).collect::<Vec<_>>());
        out.extend(after.iter().copied());
        let in_order = (1..=3u64)
            .filter(|&name| sequences(&out, name) == (0..9).collect::<Vec<_>>())
            .count();
        if !split {
            assert!(in_order < 3, "the whole-queue move reorders: {out:?}");
            continue;
        }
        assert_eq!(in_order, 3, "{out:?}");
        // Each flow's carried packets sit in its new queue: they leave
        // under its new id, before any of its next packets.
        for name in 1..=3u64 {
            let ids: std::collections::BTreeSet<u32> = after
                .iter()
                .filter(|(_, p)| p.token / 100 == name)
                .map(|(_, p)| p.flow.0)
                .collect();
            assert_eq!(
                ids.into_iter().collect::<Vec<_>>(),
                [name as u32],
                "{after:?}"
            );
        }
        // Counters: the moved packets were counted out of the old queue's
        // history and into their new queues; the history (the 3 packets
        // out before the change) stays with flow 0, the heir.
        let pipe = set.pipe_mut(5, 0).unwrap();
        let c: Vec<_> = pipe.all_flow_counters().copied().collect();
        for (f, fc) in c.iter().enumerate() {
            assert_eq!(fc.held(), 0, "flow {f}: {fc:?}");
            assert_eq!(
                fc.in_packets,
                fc.out_packets + fc.dropped_packets,
                "flow {f}"
            );
            assert_eq!(fc.in_bytes, fc.out_bytes, "flow {f}");
        }
        let carried = |name: u64| {
            5 - out[..3]
                .iter()
                .filter(|(_, p)| p.token / 100 == name)
                .count() as u64
        };
        assert_eq!(c[0].out_packets, 3 + carried(1) + 4);
        assert_eq!(c[1].in_packets, carried(2) + 4);
        assert_eq!(c[2].in_packets, carried(3) + 4);
        assert_eq!(c.iter().map(|f| f.out_packets).sum::<u64>(), 27);
    }
}

#[test]
fn a_finer_sched_mask_splits_queued_and_in_flight_packets_by_instance() {
    // One instance under QFQ holds sources 1, 2, 3 mixed; the new sched
    // mask keeps the source: source 1 on instance 0 (the heir), 2 on
    // instance 1, and 3 finds no instance (the table is full, no overflow):
    // its packets are dropped as flow_removed, counted. In flight packets
    // keep their exit times on their own instance's delay line.
    let now = Instant::from_nanos(4_500_000);
    let whole = |_: u32, _: FlowId| Some((0, FlowId(0)));
    let own = |_: u32, _: FlowId, p: &Packet| match p.token / 100 {
        1 => Some((0, FlowId(0))),
        2 => Some((1, FlowId(0))),
        _ => None,
    };
    for split in [false, true] {
        let (mut set, mut out) = mixed_queue(AlgKind::Qfq, 6, 5);
        let new = vec![
            (0, 1, short(AlgKind::Qfq, 1), 1),
            (1, 2, short(AlgKind::Qfq, 1), 1),
        ];
        let gone = if split {
            set.replace_link_splitting(6, now, new, &whole, &mut { own })
                .unwrap()
        } else {
            set.replace_link_moving(6, now, new, &whole).unwrap()
        };
        let old = gone[0].1;
        // Sources 1 and 2 send 4 more packets each, on their own instance.
        for seq in 5..9 {
            for (name, id) in [(1u64, 1u32), (2, 2)] {
                set.enqueue(now, Packet::new(FlowId(id), 1000, name * 100 + seq))
                    .unwrap();
            }
        }
        let (after, late) = drain(&mut set, now);
        assert_eq!(set.queued(), 0);
        out.extend(after.iter().copied());
        if !split {
            assert!(late.is_empty(), "{late:?}");
            assert_eq!(after.len(), 20);
            assert_ne!(sequences(&out, 2), (0..9).collect::<Vec<_>>(), "{out:?}");
            continue;
        }
        // Source 3: what left before the change, the rest dropped.
        let dropped = 5 - sequences(&out, 3).len() as u64;
        assert_eq!(late.len() as u64, dropped, "{late:?}");
        assert!(late
            .iter()
            .all(|r| r.reason == DropReason::FlowRemoved && r.packet.token / 100 == 3));
        assert_eq!(old.dropped(DropReason::FlowRemoved), dropped);
        assert_eq!(out.len() as u64 + dropped, 23);
        for name in [1u64, 2] {
            assert_eq!(sequences(&out, name), (0..9).collect::<Vec<_>>(), "{out:?}");
        }
        // The packet in the delay line (exit 5 ms) and the one on the
        // link (exit 6 ms) keep their exits on their own instance; each
        // instance's link starts at 5 ms, when the old one is free.
        for (_, p) in &after {
            let inst = set.member_of(p.flow).map(|m| m.1);
            assert_eq!(inst, Some((p.token / 100 - 1) as u32), "{p:?}");
        }
        let first: Vec<(u64, u64)> = after
            .iter()
            .take(4)
            .map(|(t, p)| (*t / MS, p.token))
            .collect();
        assert_eq!(first, [(5, 101), (6, 201), (7, 102), (7, 202)]);
    }
}

/// A one-flow DRR pipe at 8 Mbit/s (1000 B take 1 ms), no delay, with a
/// burst of `burst` bytes.
fn bursty(burst: u64) -> Pipe<AnyScheduler> {
    let cfg = PipeConfig {
        bw: Some(Rate::checked("bw", 8_000_000u64).unwrap()),
        burst_bytes: burst,
        ..PipeConfig::default()
    };
    pipe_of(AlgKind::Drr, 1, cfg)
}

#[test]
fn a_rebuild_in_the_middle_of_a_burst_keeps_the_credit_left() {
    // After 100 ms of idle the link may send 5000 B at line speed. Three
    // packets use 3000 B of it at 100 ms; the link is rebuilt at that
    // instant (a flowset added), and three more packets arrive then: two
    // of them are still covered by the credit, the third pays 1 ms.
    // Rebuilt with a smaller burst (1500 B), the credit is capped there:
    // one packet is covered, the next half (0.5 ms), the last pays 1 ms.
    let at = Instant::from_nanos(100 * MS);
    let plans = [
        (5000u64, [0u64, 0, 0, 0, 0, 1000]),
        (1500, [0, 0, 0, 0, 500, 1500]),
    ];
    for (new_burst, expected) in plans {
        let mut set = PipeSet::new();
        set.push(4, 0, bursty(5000), 1).unwrap();
        set.reserve(1).unwrap();
        for seq in 0..3 {
            set.enqueue(at, Packet::new(FlowId(0), 1000, seq)).unwrap();
        }
        let mut out = Vec::new();
        while let Some(p) = set.dequeue(at) {
            out.push((at.as_nanos(), p));
        }
        assert_eq!(out.len(), 3);
        let gone = set
            .replace_link_moving(4, at, vec![(0, 1, bursty(new_burst), 1)], &|i, f| {
                Some((i, f))
            })
            .unwrap();
        assert_eq!(gone.len(), 1);
        for seq in 3..6 {
            set.enqueue(at, Packet::new(FlowId(1), 1000, seq)).unwrap();
        }
        let (rest, late) = drain(&mut set, at);
        assert!(late.is_empty(), "{late:?}");
        out.extend(rest);
        let us: Vec<u64> = out
            .iter()
            .map(|(t, _)| (*t - at.as_nanos()) / 1000)
            .collect();
        assert_eq!(us, expected, "new burst {new_burst}: {out:?}");
        let tokens: Vec<u64> = out.iter().map(|(_, p)| p.token).collect();
        assert_eq!(tokens, (0..6).collect::<Vec<_>>());
    }
}

/// A one-flow DRR pipe losing half its packets (`plr 0.5`), seeded.
fn lossy(seed: u64) -> Pipe<AnyScheduler> {
    let cfg = PipeConfig {
        bw: Some(Rate::checked("bw", 8_000_000u64).unwrap()),
        queue: QueueConfig {
            plr: 0.5,
            ..QueueConfig::default()
        },
        seed,
        ..PipeConfig::default()
    };
    pipe_of(AlgKind::Drr, 1, cfg)
}

/// Two sets, each holding link `link` as one instance of `pipe()` with
/// one spare id: one to keep, one to rebuild.
fn twin_links(
    link: u32,
    pipe: impl Fn() -> Pipe<AnyScheduler>,
) -> (PipeSet<AnyScheduler>, PipeSet<AnyScheduler>) {
    let twin = || {
        let mut set = PipeSet::new();
        set.push(link, 0, pipe(), 1).unwrap();
        set.reserve(1).unwrap();
        set
    };
    (twin(), twin())
}

#[test]
fn a_rebuilt_link_continues_its_random_draws() {
    // Two links with the same seed see the same 60 packets, one every
    // 20 ms; one of them is rebuilt (same configuration, new ids) after
    // 30. Its loss draws go on where they were: both lose the same packets.
    let (mut kept, mut rebuilt) = twin_links(8, || lossy(11));
    let mut fates = [Vec::new(), Vec::new()];
    for seq in 0..60u64 {
        let at = Instant::from_nanos(seq * 20 * MS);
        if seq == 30 {
            let gone = rebuilt
                .replace_link_moving(8, at, vec![(0, 1, lossy(11), 1)], &|i, f| Some((i, f)))
                .unwrap();
            assert_eq!(gone.len(), 1);
        }
        for (k, set) in [&mut kept, &mut rebuilt].into_iter().enumerate() {
            drain(set, at);
            let flow = set.global(8, 0, FlowId(0)).unwrap();
            fates[k].push(set.enqueue(at, Packet::new(flow, 1000, seq)).is_ok());
        }
    }
    assert_eq!(fates[0], fates[1]);
    // The draws are random: both fates occur after the change.
    let after: std::collections::BTreeSet<bool> = fates[0][30..].iter().copied().collect();
    assert_eq!(after.len(), 2, "{:?}", fates[0]);
}

/// A one-flow DRR pipe with tc-netem's running states: correlated normal
/// jitter (2 ms, correlation 0.9), every 3rd packet a candidate to skip
/// the delay (`reorder 50% gap 3`) and slots of 1 to 3 ms holding at most
/// 4 packets, seeded.
fn netem_like(seed: u64) -> Pipe<AnyScheduler> {
    use pspat_sched::pipe::slot::{SlotInterval, Slots};
    use pspat_sched::pipe::NetemReorder;
    let cfg = PipeConfig {
        bw: Some(Rate::checked("bw", 80_000_000u64).unwrap()),
        delay_ns: 10 * MS,
        jitter: Some(Jitter {
            ns: 2 * MS,
            distribution: JitterDistribution::Normal,
        }),
        jitter_correlation: 0.9,
        reorder: true,
        netem_reorder: Some(NetemReorder {
            probability: 0.5,
            gap: 3,
            correlation: 0.6,
        }),
        slots: Some(Slots {
            interval: SlotInterval::Uniform {
                min_ns: MS,
                max_ns: 3 * MS,
            },
            packets: Some(4),
            bytes: None,
        }),
        delay_line_capacity: 256,
        seed,
        queue: QueueConfig {
            duplicate: 0.3,
            duplicate_correlation: 0.5,
            corrupt: 0.4,
            corrupt_correlation: 0.9,
            ..QueueConfig::default()
        },
        ..PipeConfig::default()
    };
    pipe_of(AlgKind::Drr, 1, cfg)
}

#[test]
fn a_rebuilt_link_keeps_its_slot_its_jitter_correlation_and_its_reorder_count() {
    // Two links with the same seed see the same 90 packets, one every
    // 700 µs, so that slots, the reorder gap and its correlated chain, the
    // queue's correlated duplication and corruption chains and the
    // jitter's AR(1) sequence are in the middle of something at any
    // instant; one of them is rebuilt (same configuration, new ids) at
    // packet `at_seq`. Every packet leaves both at the same instant, in the
    // same order, with the same marks (a copy in the delay line goes on
    // behind its original).
    for at_seq in [20, 31, 45, 58, 71] {
        let outs = kept_and_rebuilt(at_seq);
        assert_eq!(outs[0].len(), 90);
        assert_eq!(outs[0], outs[1], "rebuilt at packet {at_seq}");
        // The slots were at work: packets left in bursts at shared instants.
        let instants: std::collections::BTreeSet<u64> = outs[0].iter().map(|o| o.0).collect();
        assert!(instants.len() < 60, "{} exit instants", instants.len());
    }
}

/// The exits `(ns, token)` of [`netem_like`] links kept and rebuilt at
/// packet `at_seq`.
fn kept_and_rebuilt(at_seq: u64) -> [Vec<(u64, u64)>; 2] {
    let (mut kept, mut rebuilt) = twin_links(9, || netem_like(17));
    let mut outs = [Vec::new(), Vec::new()];
    let mut last = Instant::ZERO;
    for seq in 0..90u64 {
        let at = Instant::from_nanos(seq * 700_000);
        if seq == at_seq {
            let gone = rebuilt
                .replace_link_moving(9, at, vec![(0, 1, netem_like(17), 1)], &|i, f| Some((i, f)))
                .unwrap();
            assert_eq!(gone.len(), 1);
        }
        for (k, set) in [&mut kept, &mut rebuilt].into_iter().enumerate() {
            drain_between(set, last, at, &mut outs[k]);
            let flow = set.global(9, 0, FlowId(0)).unwrap();
            set.enqueue(at, Packet::new(flow, 1000, seq)).unwrap();
        }
        last = at;
    }
    for (k, set) in [&mut kept, &mut rebuilt].into_iter().enumerate() {
        let (rest, late) = drain(set, last);
        assert!(late.is_empty(), "{late:?}");
        outs[k].extend(rest);
    }
    outs.map(|out| out.iter().map(|(t, p)| (*t, p.token)).collect())
}
