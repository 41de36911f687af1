//! FQ-CoDel as pspat builds it, in virtual time: flow queueing
//! ([`pspat_sched::Fq`]) behind a pipe whose queues run CoDel. A sparse
//! flow among backlogged ones leaves at once where DRR makes it wait its
//! turn in the round, while the backlogged flows share the link equally and
//! CoDel keeps their queues short.

use pspat_sched::pipe::{Codel, QueueConfig, QueueLimit};
use pspat_sched::{
    DropReason, Drr, Fate, FlowId, FlowTable, Fq, Instant, Packet, Pipe, PipeConfig, Scheduler,
};

use crate::pipe_common::{at, drive, rate, Run};

const MS: u64 = 1_000_000;
/// Backlogged flows 0..BULK; the sparse flow is `BULK`.
const BULK: u32 = 20;
/// 10 Mbit/s: a 1000-byte packet takes 0.8 ms on the link.
const LINK_BPS: u64 = 10_000_000;
/// Packets of the sparse flow.
const SPARSE: u64 = 400;

fn config() -> PipeConfig {
    PipeConfig {
        bw: Some(rate(LINK_BPS)),
        queue: QueueConfig {
            limit: QueueLimit::Slots(1_000),
            codel: Some(Codel::default()),
            ..QueueConfig::default()
        },
        ..PipeConfig::default()
    }
}

/// 20 s of traffic: each backlogged flow sends 1000-byte packets at
/// 1 Mbit/s (twice the link between them), the sparse flow one 100-byte
/// packet every 50 ms, its tokens from 1 000 000 up. A round of the
/// backlogged flows takes about 32 ms (two packets of each: 1514 bytes of
/// quantum), so the sparse flow has left the lists before its next packet
/// (RFC 8290 §1.3: a flow is sparse if it empties within a round).
fn arrivals() -> Vec<(Instant, Packet)> {
    let mut v = Vec::new();
    let mut token = 0;
    for f in 0..BULK {
        // 125 packets a second, the flows' phases spread over 8 ms.
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

/// The sparse flow's waits before the link, ms (exit less arrival less its
/// own 0.08 ms on the link).
fn sparse_waits(run: &Run, arrivals: &[(Instant, Packet)]) -> Vec<f64> {
    let arrived = |token: u64| {
        arrivals
            .iter()
            .find(|(_, p)| p.token == token)
            .map(|(t, _)| t.as_nanos())
            .unwrap()
    };
    run.with_fate(Fate::Transmit)
        .filter(|e| e.packet.flow == FlowId(BULK))
        .map(|e| (e.at.as_nanos() - arrived(e.packet.token)) as f64 / MS as f64 - 0.08)
        .collect()
}

fn run_with<S: Scheduler>(sched: S) -> (Pipe<S>, Run) {
    let mut pipe = Pipe::new(config(), sched, BULK as usize + 1).unwrap();
    let run = drive(&mut pipe, &arrivals());
    (pipe, run)
}

fn table() -> FlowTable {
    FlowTable::uniform(BULK as usize + 1).unwrap()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

#[test]
fn a_sparse_flow_goes_ahead_of_backlogged_ones_under_fq_and_waits_its_turn_under_drr() {
    let arrivals = arrivals();
    let (fq_pipe, fq_run) = run_with(Fq::new(table(), 40_000, 1_514).unwrap());
    let (drr_pipe, drr_run) = run_with(Drr::new(table(), 40_000).unwrap());
    let fq = sparse_waits(&fq_run, &arrivals);
    let drr = sparse_waits(&drr_run, &arrivals);
    assert_eq!(fq.len() as u64, SPARSE, "every sparse packet sent under FQ");
    assert_eq!(
        drr.len() as u64,
        SPARSE,
        "every sparse packet sent under DRR"
    );
    // The first sparse packet (at 3 ms) comes while the backlogged flows'
    // first packets are new flows too, and waits behind them on the new
    // list; from then on only the packet on the link is ahead of it.
    let fq_max = fq[1..].iter().copied().fold(0.0, f64::max);
    let first = fq[0];
    let (fq_median, drr_median) = (median(fq), median(drr));
    eprintln!(
        "sparse flow's wait: FQ median {fq_median:.3} ms, max {fq_max:.3} ms after the first \
         ({first:.3} ms); DRR median {drr_median:.3} ms"
    );
    // Under FQ a sparse packet waits at most for the packet on the link.
    assert!(fq_max <= 0.8 + 1e-6, "FQ max wait {fq_max} ms");
    // Under DRR it waits for its place in the round of 20 flows (up to
    // 16 ms, about half of it on average).
    assert!(drr_median > 4.0, "DRR median wait {drr_median} ms");
    for pipe in [&fq_pipe.counters(), &drr_pipe.counters()] {
        assert!(pipe.dropped(DropReason::Codel) > 0, "CoDel dropped");
        assert_eq!(pipe.in_packets, pipe.out_packets + pipe.dropped_total());
    }
}

#[test]
fn backlogged_flows_share_equally_and_codel_keeps_their_queues_short() {
    let (pipe, run) = run_with(Fq::new(table(), 40_000, 1_514).unwrap());
    // Bytes sent per backlogged flow over the run.
    let mut sent = vec![0u64; BULK as usize];
    for e in run.with_fate(Fate::Transmit) {
        if e.packet.flow.0 < BULK {
            sent[e.packet.flow.index()] += u64::from(e.packet.len);
        }
    }
    let (lo, hi) = (
        *sent.iter().min().unwrap() as f64,
        *sent.iter().max().unwrap() as f64,
    );
    eprintln!("bytes per backlogged flow: {lo} to {hi}");
    assert!(hi / lo < 1.01, "shares {sent:?}");
    // Each flow's half of its traffic above its share is dropped by CoDel,
    // not by the 1000-packet limit, and the queues stay near CoDel's target
    // instead of growing to the limit (1000 packets would be 16 s at a
    // twentieth of the link).
    let c = pipe.counters();
    assert_eq!(c.dropped(DropReason::QueueFull), 0);
    let codel = c.dropped(DropReason::Codel) as f64 / c.in_packets as f64;
    eprintln!(
        "CoDel dropped {codel:.3}, limit {}",
        c.dropped(DropReason::QueueFull)
    );
    assert!((0.40..0.55).contains(&codel), "CoDel dropped {codel:.3}");
    let waits: Vec<f64> = run
        .with_fate(Fate::Transmit)
        .filter(|e| e.packet.flow.0 < BULK)
        .filter(|e| e.at.as_nanos() > 10_000 * MS)
        .map(|e| {
            let f = u64::from(e.packet.flow.0);
            let i = e.packet.token - f * 2_500;
            let arrived = i * 8 * MS + f * 8 * MS / u64::from(BULK);
            (e.at.as_nanos() - arrived) as f64 / MS as f64
        })
        .collect();
    let m = median(waits);
    eprintln!(
        "backlogged flows' median sojourn over the last 10 s: {m:.1} ms; CoDel dropped {codel:.3}"
    );
    assert!(m < 100.0, "median sojourn {m} ms");
}

/// A pipe of three queues under FQ at 1 Mbit/s (a 1000-byte packet takes
/// 8 ms), holding at most 10 packets in all.
fn held_limit_pipe<S: Scheduler>(sched: S) -> Pipe<S> {
    let cfg = PipeConfig {
        bw: Some(rate(1_000_000)),
        held_limit: Some(10),
        ..PipeConfig::default()
    };
    Pipe::new(cfg, sched, 3).unwrap()
}

#[test]
fn over_the_held_limit_the_longest_queue_loses_its_head() {
    let mut pipe = held_limit_pipe(Fq::new(FlowTable::uniform(3).unwrap(), 64, 1_514).unwrap());
    let t = at(0);
    // Flow 0: 8 packets (the first goes on the link at once), flow 1: 3.
    for i in 0..8 {
        pipe.enqueue(t, Packet::new(FlowId(0), 1_000, i)).unwrap();
    }
    for i in 0..3 {
        pipe.enqueue(t, Packet::new(FlowId(1), 1_000, 10 + i))
            .unwrap();
    }
    // 7 + 3 = 10 queued (one on the link): full. Flow 2's packet is
    // queued, and flow 0's head (token 1, the oldest still queued) goes.
    pipe.enqueue(t, Packet::new(FlowId(2), 1_000, 20)).unwrap();
    assert_eq!(pipe.queue_len(FlowId(0)).map(|l| l.0), Some(6));
    // Flow 1 grows to the longest with flow 0 (6 each, ties to the lowest
    // id) ... flow 0 loses again, then flow 1, in turn.
    pipe.enqueue(t, Packet::new(FlowId(1), 1_000, 13)).unwrap();
    pipe.enqueue(t, Packet::new(FlowId(1), 1_000, 14)).unwrap();
    pipe.enqueue(t, Packet::new(FlowId(1), 1_000, 15)).unwrap();
    let mut exits = Vec::new();
    pipe.release(at(10_000 * MS), &mut |e| exits.push(e));
    let dropped: Vec<u64> = exits
        .iter()
        .filter(|e| e.fate == Fate::Dropped(DropReason::QueueFull))
        .map(|e| e.packet.token)
        .collect();
    assert_eq!(
        dropped,
        [1, 2, 3, 10],
        "heads of the longest queue, oldest first"
    );
    // Reported behind what the line already held (token 0, on the link
    // until 8 ms), ahead of everything sent after.
    assert_eq!((exits[0].packet.token, exits[0].at), (0, at(8 * MS)));
    assert!(exits[1..5]
        .iter()
        .all(|e| e.at == at(8 * MS) && e.fate != Fate::Transmit));
    let sent: Vec<u64> = exits
        .iter()
        .filter(|e| e.fate == Fate::Transmit)
        .map(|e| e.packet.token)
        .collect();
    assert_eq!(sent.len(), 11);
    let c = pipe.counters();
    assert_eq!(c.dropped(DropReason::QueueFull), 4);
    assert_eq!(c.in_packets, c.out_packets + c.dropped_total());
    assert_eq!(pipe.held(), 0);
}

#[test]
fn a_scheduler_that_cannot_drop_a_head_refuses_the_arrival_instead() {
    let mut pipe = held_limit_pipe(Drr::new(FlowTable::uniform(3).unwrap(), 64).unwrap());
    let t = at(0);
    for i in 0..11 {
        pipe.enqueue(t, Packet::new(FlowId(0), 1_000, i)).unwrap();
    }
    let r = pipe
        .enqueue(t, Packet::new(FlowId(1), 1_000, 99))
        .expect_err("full");
    assert_eq!((r.packet.token, r.reason), (99, DropReason::QueueFull));
    assert_eq!(pipe.counters().dropped(DropReason::QueueFull), 1);
}

#[test]
fn an_arrival_to_an_empty_queue_never_drops_itself_from_the_head() {
    // Ten queues of one packet each would be needed to make the arrival's
    // own empty queue the longest; with one queue at the limit the longest
    // is that queue, and a packet of flow 0 itself drops flow 0's head.
    let mut pipe = held_limit_pipe(Fq::new(FlowTable::uniform(3).unwrap(), 64, 1_514).unwrap());
    let t = at(0);
    for i in 0..11 {
        pipe.enqueue(t, Packet::new(FlowId(0), 1_000, i)).unwrap();
    }
    pipe.enqueue(t, Packet::new(FlowId(0), 1_000, 11)).unwrap();
    let mut exits = Vec::new();
    pipe.release(at(10_000 * MS), &mut |e| exits.push(e));
    let order: Vec<(u64, bool)> = exits
        .iter()
        .map(|e| (e.packet.token, e.fate == Fate::Transmit))
        .collect();
    assert_eq!(order[0], (0, true), "the packet on the link");
    assert_eq!(order[1], (1, false), "the oldest queued packet dropped");
    assert_eq!(order.iter().filter(|(_, sent)| *sent).count(), 11);
    assert_eq!(order.last(), Some(&(11, true)), "the arrival kept, last");
}

/// As the daemon builds an fq_codel flowset: each queue's own slot limit
/// is the held limit. A single flow that fills it keeps its newest
/// packets, as FQ-CoDel drops from the head: its oldest queued packet goes
/// (`queue_full`), not the arrival. A limit in bytes still refuses it.
#[test]
fn a_flow_at_its_own_slot_limit_loses_its_head_under_a_held_limit() {
    let cfg = |limit| PipeConfig {
        bw: Some(rate(1_000_000)),
        held_limit: Some(10),
        queue: QueueConfig {
            limit,
            ..QueueConfig::default()
        },
        ..PipeConfig::default()
    };
    let fq = || Fq::new(FlowTable::uniform(3).unwrap(), 64, 1_514).unwrap();
    let mut pipe = Pipe::new(cfg(QueueLimit::Slots(10)), fq(), 3).unwrap();
    let t = at(0);
    // Token 0 goes on the link at once; 1..=10 fill the queue.
    for i in 0..13 {
        pipe.enqueue(t, Packet::new(FlowId(0), 1_000, i)).unwrap();
    }
    assert_eq!(pipe.queue_len(FlowId(0)).map(|l| l.0), Some(10));
    let mut exits = Vec::new();
    pipe.release(at(10_000 * MS), &mut |e| exits.push(e));
    let dropped: Vec<u64> = exits
        .iter()
        .filter(|e| e.fate == Fate::Dropped(DropReason::QueueFull))
        .map(|e| e.packet.token)
        .collect();
    assert_eq!(dropped, [1, 2], "the oldest queued packets");
    let sent: Vec<u64> = exits
        .iter()
        .filter(|e| e.fate == Fate::Transmit)
        .map(|e| e.packet.token)
        .collect();
    assert_eq!(sent, [0, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]);
    let c = pipe.counters();
    assert_eq!(c.dropped(DropReason::FlowLimit), 0);
    assert_eq!(c.in_packets, c.out_packets + c.dropped_total());

    let mut pipe = Pipe::new(cfg(QueueLimit::Bytes(10_000)), fq(), 3).unwrap();
    for i in 0..11 {
        pipe.enqueue(t, Packet::new(FlowId(0), 1_000, i)).unwrap();
    }
    let r = pipe
        .enqueue(t, Packet::new(FlowId(0), 1_000, 11))
        .expect_err("a byte limit refuses");
    assert_eq!((r.packet.token, r.reason), (11, DropReason::FlowLimit));
}
