//! PIE in virtual time: a FIFO pipe overloaded by a sixth settles its
//! queueing delay near PIE's target (both delay estimators) where drop-tail
//! grows without bound; ECN marks instead of drops; FQ-PIE (flow queueing,
//! [`pspat_sched::Fq`], behind PIE queues) keeps a sparse flow's delay at
//! the packet on the link beside backlogged flows; every packet accounted
//! for and the same seed replaying the same drops.

use pspat_sched::pipe::pie::DelayEstimator;
use pspat_sched::pipe::{Pie, QueueConfig, QueueLimit};
use pspat_sched::{
    DropReason, Fate, FlowId, FlowTable, Fq, Instant, Packet, Pipe, PipeConfig, Scheduler,
};

use crate::pipe_common::{at, drive, fifo_pipe, rate, Run};

const MS: u64 = 1_000_000;
/// 10 Mbit/s: a 1000-byte packet takes 0.8 ms on the link (1 250 a second).
const LINK_BPS: u64 = 10_000_000;

/// A FIFO pipe of one queue at 10 Mbit/s holding up to 30 000 packets
/// (room for all a drop-tail run keeps), with `pie` on it.
fn pie_pipe(pie: Option<Pie>) -> Pipe<pspat_sched::Fifo> {
    fifo_pipe(
        PipeConfig {
            bw: Some(rate(LINK_BPS)),
            queue: QueueConfig {
                limit: QueueLimit::Slots(30_000),
                pie,
                ..QueueConfig::default()
            },
            held_capacity: 40_000,
            ..PipeConfig::default()
        },
        1,
        40_000,
    )
}

/// 1 500 packets a second of 1000 bytes (a fifth more than the link
/// sends: a sixth of them too many) for 60 s: packet `i` arrives at
/// `t(i)`.
fn t(i: u64) -> u64 {
    i * 1_000 * MS / 1_500
}

const N: u64 = 90_000;

fn overload() -> Vec<(Instant, Packet)> {
    (0..N)
        .map(|i| (at(t(i)), Packet::new(FlowId(0), 1_000, i)))
        .collect()
}

/// The sojourn before the link of each packet sent, ms, over the last ten
/// seconds of arrivals.
fn last_sojourns_ms(run: &Run) -> Vec<f64> {
    run.with_fate(Fate::Transmit)
        .filter(|e| e.packet.without_marks().token >= N - 15_000)
        .map(|e| {
            let i = e.packet.without_marks().token;
            (e.at.as_nanos() - t(i)) as f64 / MS as f64 - 0.8
        })
        .collect()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

#[test]
fn under_overload_pie_settles_the_delay_near_target_where_drop_tail_does_not() {
    let mut tail = pie_pipe(None);
    let tail_delay = median(last_sojourns_ms(&drive(&mut tail, &overload())));
    assert!(
        tail_delay > 5_000.0,
        "drop-tail's queue grows: {tail_delay} ms"
    );
    assert_eq!(tail.counters().dropped_total(), 0);
    assert!(tail.pie_state(FlowId(0)).is_none());
    let target_ms = Pie::default().target_ns as f64 / MS as f64;
    for estimator in [DelayEstimator::Timestamp, DelayEstimator::DepartureRate] {
        let pie = Pie {
            estimator,
            ..Pie::default()
        };
        let mut pipe = pie_pipe(Some(pie));
        let run = drive(&mut pipe, &overload());
        let delay = median(last_sojourns_ms(&run));
        let c = pipe.counters();
        let dropped = c.dropped(DropReason::Pie) as f64 / N as f64;
        let prob = pipe.pie_state(FlowId(0)).unwrap().probability();
        eprintln!(
            "{estimator:?}: last 10 s, median sojourn {delay:.1} ms (drop-tail {tail_delay:.0} ms); \
             PIE dropped {dropped:.4} of the packets, probability at the end {prob:.4}"
        );
        assert!(
            (0.5 * target_ms..=3.0 * target_ms).contains(&delay),
            "{estimator:?}: median sojourn {delay} ms against a {target_ms} ms target"
        );
        // It drops about the sixth that is too many (1 500 offered, 1 250
        // sent), and nothing else drops.
        assert!(
            (0.15..0.18).contains(&dropped),
            "{estimator:?}: PIE dropped {dropped:.4}"
        );
        assert_eq!(c.dropped_total(), c.dropped(DropReason::Pie));
        assert_eq!(c.in_packets, c.out_packets + c.dropped_total());
        // PIE drops on arrival: every drop was refused by enqueue.
        assert_eq!(run.rejected.len() as u64, c.dropped_total());
    }
}

#[test]
fn with_ecn_ect_packets_are_marked_and_the_others_dropped() {
    let pie = Pie {
        ecn: true,
        estimator: DelayEstimator::Timestamp,
        ..Pie::default()
    };
    let mut pipe = pie_pipe(Some(pie));
    // 2% too many for 40 s: the probability settles near 0.04, below
    // max_ecnth (0.1), with half the packets ECN-capable.
    let arrivals: Vec<_> = (0..51_000u64)
        .map(|i| {
            let p = Packet::new(FlowId(0), 1_000, i);
            let p = if i % 2 == 1 { p.with_ect() } else { p };
            (at(i * 1_000 * MS / 1_275), p)
        })
        .collect();
    let run = drive(&mut pipe, &arrivals);
    let marked: Vec<u64> = run
        .with_fate(Fate::Transmit)
        .filter(|e| e.packet.is_ce())
        .map(|e| e.packet.without_marks().token)
        .collect();
    let dropped: Vec<u64> = run.rejected.iter().map(|(_, r)| r.packet.token).collect();
    eprintln!("ECN: {} marked, {} dropped", marked.len(), dropped.len());
    assert!(!marked.is_empty() && !dropped.is_empty());
    assert!(marked.iter().all(|t| t % 2 == 1), "a Not-ECT packet marked");
    assert_eq!(pipe.counters().marked, marked.len() as u64);
    // An ECT packet is dropped only while the probability is at or above
    // max_ecnth: a few of them, against the non-ECT packets dropped.
    let ect_drops = dropped.iter().filter(|t| *t % 2 == 1).count();
    assert!(
        ect_drops * 10 < dropped.len(),
        "{ect_drops} ECT drops of {}",
        dropped.len()
    );
}

#[test]
fn the_same_seed_replays_the_same_drops() {
    let run = |seed| {
        let mut pipe = fifo_pipe(
            PipeConfig {
                bw: Some(rate(LINK_BPS)),
                queue: QueueConfig {
                    limit: QueueLimit::Slots(10_000),
                    pie: Some(Pie {
                        derand: false,
                        ..Pie::default()
                    }),
                    ..QueueConfig::default()
                },
                seed,
                ..PipeConfig::default()
            },
            1,
            20_000,
        );
        let arrivals: Vec<_> = overload().into_iter().take(20_000).collect();
        drive(&mut pipe, &arrivals)
            .rejected
            .iter()
            .map(|(_, r)| r.packet.token)
            .collect::<Vec<_>>()
    };
    let (a, b, c) = (run(7), run(7), run(8));
    assert!(!a.is_empty());
    assert_eq!(a, b);
    assert_ne!(a, c, "another seed draws other drops");
}

/// Backlogged flows 0..BULK; the sparse flow is `BULK`.
const BULK: u32 = 20;
const SPARSE: u64 = 400;

/// 20 s: each backlogged flow sends 1000-byte packets at 1 Mbit/s (twice
/// the link between them), the sparse flow one 100-byte packet every
/// 50 ms, its tokens from 1 000 000 up (the traffic of the FQ-CoDel test).
fn fq_arrivals() -> Vec<(Instant, Packet)> {
    let mut v = Vec::new();
    let mut token = 0;
    for f in 0..BULK {
        for i in 0..2_500u64 {
            let t = i * 8 * MS + u64::from(f) * 8 * MS / u64::from(BULK);
            v.push((at(t), Packet::new(FlowId(f), 1_000, token)));
            token += 1;
        }
    }
    for i in 0..SPARSE {
        v.push((
            at(i * 50 * MS + 3 * MS),
            Packet::new(FlowId(BULK), 100, 1_000_000 + i),
        ));
    }
    v.sort_by_key(|(t, p)| (*t, p.token));
    v
}

/// FQ-PIE as pspat builds `fq_pie`: FQ's quantum 1514, PIE with fq_pie's
/// defaults on every queue, 1 000 slots a queue.
fn fq_pie_pipe() -> Pipe<Fq> {
    let table = FlowTable::uniform(BULK as usize + 1).unwrap();
    let cfg = PipeConfig {
        bw: Some(rate(LINK_BPS)),
        queue: QueueConfig {
            limit: QueueLimit::Slots(1_000),
            pie: Some(Pie::fq_default()),
            ..QueueConfig::default()
        },
        held_limit: Some(10_240),
        ..PipeConfig::default()
    };
    Pipe::new(
        cfg,
        Fq::new(table, 40_000, 1_514).unwrap(),
        BULK as usize + 1,
    )
    .unwrap()
}

#[test]
fn fq_pie_keeps_a_sparse_flow_ahead_of_backlogged_ones() {
    let arrivals = fq_arrivals();
    let mut pipe = fq_pie_pipe();
    let run = drive(&mut pipe, &arrivals);
    let arrived = |token: u64| {
        arrivals
            .iter()
            .find(|(_, p)| p.token == token)
            .map(|(t, _)| t.as_nanos())
            .unwrap()
    };
    let waits: Vec<f64> = run
        .with_fate(Fate::Transmit)
        .filter(|e| e.packet.flow == FlowId(BULK))
        .map(|e| (e.at.as_nanos() - arrived(e.packet.token)) as f64 / MS as f64 - 0.08)
        .collect();
    assert_eq!(waits.len() as u64, SPARSE, "every sparse packet sent");
    let sparse_max = waits[1..].iter().copied().fold(0.0, f64::max);
    // The backlogged flows' sojourns over the last 10 s.
    let bulk: Vec<f64> = run
        .with_fate(Fate::Transmit)
        .filter(|e| e.packet.flow.0 < BULK && e.at.as_nanos() > 10_000 * MS)
        .map(|e| {
            let f = u64::from(e.packet.flow.0);
            let i = e.packet.token - f * 2_500;
            let arrived = i * 8 * MS + f * 8 * MS / u64::from(BULK);
            (e.at.as_nanos() - arrived) as f64 / MS as f64
        })
        .collect();
    let bulk_median = median(bulk);
    let c = pipe.counters();
    let dropped = c.dropped(DropReason::Pie) as f64 / c.in_packets as f64;
    eprintln!(
        "FQ-PIE: sparse flow's max wait {sparse_max:.3} ms after its first ({:.3} ms); \
         backlogged flows' median sojourn over the last 10 s {bulk_median:.1} ms; \
         PIE dropped {dropped:.3}",
        waits[0]
    );
    // A sparse packet waits at most for the packet on the link.
    assert!(sparse_max <= 0.8 + 1e-6, "sparse max wait {sparse_max} ms");
    // Each backlogged flow sends twice its share: PIE drops about half of
    // its traffic, not the limits, and holds each queue's delay near the
    // 15 ms target instead of letting it grow to 1 000 packets (16 s).
    assert!((0.40..0.55).contains(&dropped), "PIE dropped {dropped:.3}");
    assert_eq!(
        c.dropped(DropReason::QueueFull) + c.dropped(DropReason::FlowLimit),
        0
    );
    assert!(
        bulk_median < 100.0,
        "backlogged median sojourn {bulk_median} ms"
    );
    assert_eq!(c.in_packets, c.out_packets + c.dropped_total());
    assert!(pipe.scheduler().is_empty());
}

/// A live change of PIE's parameters counts from the change: the updates
/// due before it use the old ones, as a periodic timer would have
/// ([`Pipe::set_queue_at`]; the lazy updates equal the timer's, pie.rs's
/// unit tests). The change at 500 ms equals settling the queue at 500 ms
/// under the old parameters and then swapping them; swapping them without
/// settling gives another probability.
#[test]
fn a_live_change_of_pie_counts_from_the_change() {
    let old = Pie {
        estimator: DelayEstimator::Timestamp,
        ..Pie::default()
    };
    let new = Pie {
        alpha: 0.0,
        beta: 0.0,
        ..old
    };
    let config = |pie| QueueConfig {
        limit: QueueLimit::Slots(30_000),
        pie: Some(pie),
        ..QueueConfig::default()
    };
    let arrivals: Vec<(Instant, Packet)> = overload()
        .into_iter()
        .filter(|(t, _)| *t < at(490 * MS))
        .collect();
    let fed = || {
        let mut pipe = pie_pipe(Some(old));
        for (t, p) in &arrivals {
            let _ = pipe.enqueue(*t, *p);
        }
        pipe
    };
    let prob = |pipe: &Pipe<pspat_sched::Fifo>| pipe.pie_state(FlowId(0)).unwrap().probability();
    let late = Packet::new(FlowId(0), 1_000, N);
    let mut changed = fed();
    changed
        .set_queue_at(at(500 * MS), FlowId(0), config(new))
        .unwrap();
    let _ = changed.enqueue(at(1_000 * MS), late);
    let mut settled = fed();
    settled
        .set_queue_at(at(500 * MS), FlowId(0), config(old))
        .unwrap();
    let at_change = prob(&settled);
    assert!(at_change > 0.0, "PIE has a probability by 500 ms");
    settled.set_queue(FlowId(0), config(new)).unwrap();
    let _ = settled.enqueue(at(1_000 * MS), late);
    assert_eq!(prob(&changed), prob(&settled));
    let mut unsettled = fed();
    unsettled.set_queue(FlowId(0), config(new)).unwrap();
    let _ = unsettled.enqueue(at(1_000 * MS), late);
    assert_ne!(prob(&unsettled), prob(&changed));
    eprintln!(
        "probability at the change {at_change:.4}; at 1 s {:.4} (without settling {:.4})",
        prob(&changed),
        prob(&unsettled)
    );
}

/// A queue that gains PIE again, or whose `onoff` changes, starts PIE
/// afresh instead of replaying periods from a state left long ago; a new
/// target keeps the state.
#[test]
fn pie_starts_afresh_when_a_queue_gains_it_or_its_onoff_changes() {
    let pie = Pie {
        estimator: DelayEstimator::Timestamp,
        ..Pie::default()
    };
    let config = |pie| QueueConfig {
        limit: QueueLimit::Slots(30_000),
        pie,
        ..QueueConfig::default()
    };
    let fed = || {
        let mut pipe = pie_pipe(Some(pie));
        for (t, p) in overload().into_iter().take(1_500) {
            let _ = pipe.enqueue(t, p);
        }
        pipe
    };
    let prob = |pipe: &Pipe<pspat_sched::Fifo>| pipe.pie_state(FlowId(0)).unwrap().probability();
    let mut pipe = fed();
    let kept = prob(&pipe);
    assert!(kept > 0.0);
    let retargeted = Pie {
        target_ns: 20 * MS,
        ..pie
    };
    pipe.set_queue(FlowId(0), config(Some(retargeted))).unwrap();
    assert_eq!(prob(&pipe), kept, "a new target keeps the state");
    // Off and on again: afresh.
    pipe.set_queue(FlowId(0), config(None)).unwrap();
    pipe.set_queue(FlowId(0), config(Some(pie))).unwrap();
    assert_eq!(prob(&pipe), 0.0);
    // Another onoff: afresh too.
    let mut pipe = fed();
    assert!(prob(&pipe) > 0.0);
    pipe.set_queue(FlowId(0), config(Some(Pie { onoff: true, ..pie })))
        .unwrap();
    assert_eq!(prob(&pipe), 0.0);
}
