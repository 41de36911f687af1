//! tc-netem's slots in virtual time: packets leave only at slot instants,
//! in bursts bounded by the budgets, never early, in order; intervals
//! drawn in their range; slots changed and turned off live.

use pspat_sched::pipe::{
    Jitter, JitterDistribution, PipeConfig, QueueConfig, QueueLimit, SlotInterval, Slots,
};
use pspat_sched::{Fate, FlowId, Instant, Packet};

use crate::pipe_common::{assert_conserved, at, drive, fifo_pipe, rate, Run};

const MS: u64 = 1_000_000;

/// A FIFO pipe at 10 Mbit/s (800 ns a byte) with `delay_ns` and `slots`.
fn config(delay_ns: u64, slots: Option<Slots>) -> PipeConfig {
    PipeConfig {
        bw: Some(rate(10_000_000)),
        delay_ns,
        slots,
        queue: QueueConfig {
            limit: QueueLimit::Slots(100_000),
            ..QueueConfig::default()
        },
        delay_line_capacity: 100_000,
        seed: 11,
        ..PipeConfig::default()
    }
}

fn every(ns: u64, packets: Option<u32>, bytes: Option<u64>) -> Slots {
    Slots {
        interval: SlotInterval::Uniform {
            min_ns: ns,
            max_ns: ns,
        },
        packets,
        bytes,
    }
}

/// (token, exit ns) of the transmitted packets, in exit order.
fn exits(run: &Run) -> Vec<(u64, u64)> {
    run.with_fate(Fate::Transmit)
        .map(|e| (e.packet.token, e.at.as_nanos()))
        .collect()
}

/// `n` packets of `len` bytes, all offered at 0.
fn burst(n: u64, len: u32) -> Vec<(Instant, Packet)> {
    (0..n)
        .map(|i| (Instant::ZERO, Packet::new(FlowId(0), len, i)))
        .collect()
}

#[test]
fn packets_wait_for_the_slot_and_leave_in_bursts_of_the_budget() {
    // Three 1250-byte packets (1 ms each on the link) leave it at 1, 2
    // and 3 ms. The first, at an idle gate, opens a slot 5 ms later (6
    // ms); the others are due by then and leave with it.
    let mut pipe = fifo_pipe(config(0, Some(every(5 * MS, None, None))), 1, 1_000);
    let run = drive(&mut pipe, &burst(3, 1_250));
    assert_eq!(exits(&run), [(0, 6 * MS), (1, 6 * MS), (2, 6 * MS)]);
    // Two a slot: the third waits for the next, 5 ms after the first.
    let mut pipe = fifo_pipe(config(0, Some(every(5 * MS, Some(2), None))), 1, 1_000);
    let run = drive(&mut pipe, &burst(3, 1_250));
    assert_eq!(exits(&run), [(0, 6 * MS), (1, 6 * MS), (2, 11 * MS)]);
    // 2000 bytes a slot: the second packet reaches it and still leaves.
    let mut pipe = fifo_pipe(config(0, Some(every(5 * MS, None, Some(2_000)))), 1, 1_000);
    let run = drive(&mut pipe, &burst(3, 1_250));
    assert_eq!(exits(&run), [(0, 6 * MS), (1, 6 * MS), (2, 11 * MS)]);
    // A packet due after its slot finds it gone: the next opens 5 ms after
    // it. The delay comes first: 10 ms, so the first exit is 1 + 10 + 5.
    let mut pipe = fifo_pipe(config(10 * MS, Some(every(5 * MS, None, None))), 1, 1_000);
    let arr = [
        (Instant::ZERO, Packet::new(FlowId(0), 1_250, 0)),
        (at(20 * MS), Packet::new(FlowId(0), 1_250, 1)),
    ];
    let run = drive(&mut pipe, &arr);
    assert_eq!(exits(&run), [(0, 16 * MS), (1, 36 * MS)]);
    assert_conserved(&pipe);
}

#[test]
fn a_greedy_stream_leaves_only_at_slot_instants_within_its_budgets() {
    // 300-byte packets every 100 µs: 24 Mbit/s offered, 10 Mbit/s sent
    // (240 µs each). Slots 1..3 ms apart, at most 8 packets and 2000 bytes.
    let slots = Slots {
        interval: SlotInterval::Uniform {
            min_ns: MS,
            max_ns: 3 * MS,
        },
        packets: Some(8),
        bytes: Some(2_000),
    };
    let arr: Vec<(Instant, Packet)> = (0..5_000)
        .map(|i| (at(i * 100_000), Packet::new(FlowId(0), 300, i)))
        .collect();
    let mut plain = fifo_pipe(config(2 * MS, None), 1, 100_000);
    let unslotted: Vec<u64> = exits(&drive(&mut plain, &arr))
        .into_iter()
        .map(|e| e.1)
        .collect();
    let mut pipe = fifo_pipe(config(2 * MS, Some(slots)), 1, 100_000);
    let run = drive(&mut pipe, &arr);
    let got = exits(&run);
    assert_eq!(got.len(), unslotted.len());
    // Order kept, never before the exit without slots.
    for (k, &(token, exit)) in got.iter().enumerate() {
        assert_eq!(token, k as u64);
        assert!(exit >= unslotted[k], "packet {token} early");
    }
    // Group by instant: each slot within its budgets (2000 bytes: the
    // seventh 300-byte packet reaches 2100 and is the last).
    let mut instants: Vec<(u64, u32)> = Vec::new();
    for &(_, exit) in &got {
        match instants.last_mut() {
            Some((t, n)) if *t == exit => *n += 1,
            _ => instants.push((exit, 1)),
        }
    }
    assert!(instants.iter().all(|&(_, n)| n <= 7), "{instants:?}");
    // With a backlog, every slot is full and the next one is 1..=3 ms on.
    let gaps: Vec<u64> = instants.windows(2).map(|w| w[1].0 - w[0].0).collect();
    assert!(gaps.iter().all(|&g| (MS..=3 * MS).contains(&g)), "{gaps:?}");
    let full = instants.iter().filter(|&&(_, n)| n == 7).count();
    assert!(
        full * 10 >= instants.len() * 9,
        "{full} of {}",
        instants.len()
    );
    // Uniform: the mean gap is 2 ms within 3 standard errors (σ of U(1,3)
    // is 0.577 ms).
    let mean = gaps.iter().sum::<u64>() as f64 / gaps.len() as f64;
    let se = 0.577 * MS as f64 / (gaps.len() as f64).sqrt();
    assert!((mean - 2.0 * MS as f64).abs() < 3.0 * se, "mean gap {mean}");
    assert_conserved(&pipe);
}

#[test]
fn a_drawn_interval_is_delay_plus_jitter_and_never_negative() {
    let slots = Slots {
        interval: SlotInterval::Drawn {
            delay_ns: 2 * MS,
            jitter: Jitter {
                ns: 500_000,
                distribution: JitterDistribution::Normal,
            },
        },
        packets: Some(1),
        bytes: None,
    };
    // One packet a slot and a backlog: the gaps are the intervals.
    let mut pipe = fifo_pipe(config(0, Some(slots)), 1, 100_000);
    let run = drive(&mut pipe, &burst(4_000, 100));
    let times: Vec<u64> = exits(&run).into_iter().map(|e| e.1).collect();
    let gaps: Vec<f64> = times.windows(2).map(|w| (w[1] - w[0]) as f64).collect();
    let n = gaps.len() as f64;
    let mean = gaps.iter().sum::<f64>() / n;
    let sd = (gaps.iter().map(|g| (g - mean).powi(2)).sum::<f64>() / (n - 1.0)).sqrt();
    assert!((mean - 2e6).abs() < 3.0 * 5e5 / n.sqrt(), "mean {mean}");
    assert!((sd - 5e5).abs() < 0.05 * 5e5, "sd {sd}");
}

#[test]
fn slots_change_live_and_turn_off() {
    let mut pipe = fifo_pipe(config(0, Some(every(5 * MS, None, None))), 1, 1_000);
    let mut out = Vec::new();
    let send = |pipe: &mut pspat_sched::pipe::Pipe<pspat_sched::Fifo>, t: u64, token| {
        pipe.enqueue(at(t), Packet::new(FlowId(0), 1_250, token))
            .unwrap();
    };
    send(&mut pipe, 0, 0);
    // The link takes it at 0; 1 ms on it, then the slot 5 ms on, placed
    // as it enters the line.
    assert_eq!(pipe.poll_at(), Some(Instant::ZERO));
    pipe.release(Instant::ZERO, &mut |e| out.push(e));
    assert_eq!(pipe.poll_at(), Some(at(6 * MS)));
    // Slots off: the packet in the line keeps its slot; a new one takes
    // none, but keeps its place behind it (it leaves the link at 3 ms).
    let off = config(0, None);
    pipe.reconfigure(at(2 * MS), &off).unwrap();
    send(&mut pipe, 2 * MS, 1);
    while let Some(t) = pipe.poll_at() {
        pipe.release(t, &mut |e| out.push(e));
    }
    let got: Vec<(u64, u64)> = out
        .iter()
        .map(|e| (e.packet.token, e.at.as_nanos()))
        .collect();
    assert_eq!(got, [(0, 6 * MS), (1, 6 * MS)]);
    // And on again, every 2 ms: the next packet waits one interval.
    pipe.reconfigure(at(10 * MS), &config(0, Some(every(2 * MS, None, None))))
        .unwrap();
    send(&mut pipe, 10 * MS, 2);
    out.clear();
    while let Some(t) = pipe.poll_at() {
        pipe.release(t, &mut |e| out.push(e));
    }
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].at, at(13 * MS));
    assert_conserved(&pipe);
}

#[test]
fn the_same_seed_gives_the_same_slots() {
    let slots = Slots {
        interval: SlotInterval::Uniform {
            min_ns: 100_000,
            max_ns: 900_000,
        },
        packets: Some(3),
        bytes: None,
    };
    let arr: Vec<(Instant, Packet)> = (0..2_000)
        .map(|i| (at(i * 50_000), Packet::new(FlowId(0), 64, i)))
        .collect();
    let mut a = fifo_pipe(config(MS, Some(slots)), 1, 10_000);
    let mut b = fifo_pipe(config(MS, Some(slots)), 1, 10_000);
    let (ra, rb) = (exits(&drive(&mut a, &arr)), exits(&drive(&mut b, &arr)));
    assert_eq!(ra, rb);
    let mut other = config(MS, Some(slots));
    other.seed = 12;
    let mut c = fifo_pipe(other, 1, 10_000);
    assert_ne!(exits(&drive(&mut c, &arr)), ra);
}

#[test]
fn a_packet_sent_ahead_by_reorder_skips_the_slots_and_their_budget() {
    // Every second packet is sent ahead (`reorder 100% gap 2`): tokens 1
    // and 3 leave as they leave the link (2 and 4 ms), as tc-netem serves
    // them before its slotted queue. Tokens 0 and 2 (due at 11 and 13 ms)
    // share the slot opened 5 ms after the first (16 ms): its budget of 2
    // is theirs alone, the packets sent ahead took none of it.
    let cfg = PipeConfig {
        reorder: true,
        netem_reorder: Some(pspat_sched::pipe::NetemReorder {
            probability: 1.0,
            gap: 2,
            correlation: 0.0,
        }),
        ..config(10 * MS, Some(every(5 * MS, Some(2), None)))
    };
    let mut pipe = fifo_pipe(cfg, 1, 1_000);
    let run = drive(&mut pipe, &burst(4, 1_250));
    assert_eq!(
        exits(&run),
        [(1, 2 * MS), (3, 4 * MS), (0, 16 * MS), (2, 16 * MS)]
    );
    assert_eq!(pipe.counters().reordered, 2);
    assert_conserved(&pipe);
}
