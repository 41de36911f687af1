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

/// A DRR pipe of `flows` flows: 8 Mbit/s (1000 B take 1 ms), 10 ms.
fn drr(flows: usize) -> Pipe<AnyScheduler> {
    let sched = SchedulerConfig::new(AlgKind::Drr)
        .build(FlowTable::uniform(flows).unwrap())
        .unwrap();
    let cfg = PipeConfig {
        bw: Some(Rate::checked("bw", 8_000_000u64).unwrap()),
        delay_ns: 10 * MS,
        ..PipeConfig::default()
    };
    Pipe::new(cfg, sched, flows).unwrap()
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
