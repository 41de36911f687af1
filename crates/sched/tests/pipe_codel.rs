//! CoDel on a pipe's queues, in virtual time: the first drops at the
//! instants RFC 8289's state machine gives, a standing queue held near the
//! target under overload, ECN marks instead of drops, live changes, flows
//! removed, and the enqueue-time store's room.

use pspat_sched::pipe::{Codel, QueueConfig, QueueLimit};
use pspat_sched::{DropReason, Fate, FlowId, FlowParams, Instant, Packet, PipeConfig};

use crate::pipe_common::{at, drive, fifo_pipe, rate, Run};

const MS: u64 = 1_000_000;

/// A FIFO pipe of `flows` queues at 1 Mbit/s (a 1000-byte packet takes
/// 8 ms), each queue holding up to 10 000 packets, with `codel` on them.
fn codel_pipe(codel: Option<Codel>, flows: usize) -> pspat_sched::Pipe<pspat_sched::Fifo> {
    fifo_pipe(
        PipeConfig {
            bw: Some(rate(1_000_000)),
            queue: QueueConfig {
                limit: QueueLimit::Slots(10_000),
                codel,
                ..QueueConfig::default()
            },
            ..PipeConfig::default()
        },
        flows,
        20_000,
    )
}

/// Arrivals of 1000-byte packets of flow 0, token `i` at `t(i)`.
fn arrivals(n: u64, t: impl Fn(u64) -> u64) -> Vec<(Instant, Packet)> {
    (0..n)
        .map(|i| (at(t(i)), Packet::new(FlowId(0), 1_000, i)))
        .collect()
}

/// The tokens CoDel dropped, in the order it dropped them.
fn codel_drops(run: &Run) -> Vec<u64> {
    run.with_fate(Fate::Dropped(DropReason::Codel))
        .map(|e| e.packet.token)
        .collect()
}

#[test]
fn the_first_drops_fall_where_the_state_machine_puts_them() {
    // 200 packets at once: packet k starts on the link at 8k ms, after a
    // sojourn of 8k ms. Packet 1 is the first above the 5 ms target, so
    // packets become droppable one interval later, at 108 ms: packet 14
    // (starting at 112 ms) is the first drop. The link stays free, and
    // packet 15 starts at 112 ms too; the next drop is due 100 ms after the
    // first (count 1), at 212 ms: packet 28, whose start is 15·8 = 120 ms
    // plus 12 packets, 216 ms. Then 100/√2 = 70.71 ms after 212 ms, at
    // 282.71 ms: packet 38 starts at 216 + 9·8 = 288 ms.
    let mut pipe = codel_pipe(Some(Codel::default()), 1);
    let run = drive(&mut pipe, &arrivals(200, |_| 0));
    let drops = codel_drops(&run);
    assert_eq!(&drops[..3], &[14, 28, 38], "drops {drops:?}");
    let first = run
        .with_fate(Fate::Dropped(DropReason::Codel))
        .next()
        .unwrap();
    assert_eq!(first.at, at(112 * MS), "reported when it left its queue");
    // The packet after a drop starts at the instant of the drop: its exit
    // is one packet time later.
    let after = run
        .with_fate(Fate::Transmit)
        .find(|e| e.packet.token == 15)
        .unwrap();
    assert_eq!(after.at, at(120 * MS));
    let c = pipe.counters();
    assert_eq!(c.dropped(DropReason::Codel), drops.len() as u64);
    assert_eq!(c.out_packets + c.dropped_total(), 200);
    assert_eq!(pipe.queue_len(FlowId(0)), Some((0, 0)));
}

#[test]
fn a_queue_that_drains_below_one_packet_is_never_dropped_from() {
    // Two packets every 16 ms into a link that sends one every 8 ms: the
    // second waits 8 ms (above target) but leaves nothing behind it.
    let mut pipe = codel_pipe(Some(Codel::default()), 1);
    let run = drive(&mut pipe, &arrivals(2_000, |i| (i / 2) * 16 * MS));
    assert!(codel_drops(&run).is_empty());
    assert_eq!(pipe.counters().out_packets, 2_000);
}

/// The sojourn of each packet sent: its exit time less its arrival (there
/// is no delay after the link, so the exit is its start plus 8 ms).
fn sojourns_ms(run: &Run, t: impl Fn(u64) -> u64) -> Vec<f64> {
    run.with_fate(Fate::Transmit)
        .map(|e| (e.at.as_nanos() - t(e.packet.token)) as f64 / MS as f64 - 8.0)
        .collect()
}

#[test]
fn under_overload_codel_holds_the_standing_queue_where_drop_tail_does_not() {
    // 150 packets/s into a link that sends 125: a sixth too many, for 60 s.
    let t = |i: u64| i * 1_000 * MS / 150;
    let n = 9_000;
    let mut tail = codel_pipe(None, 1);
    let tail_run = drive(&mut tail, &arrivals(n, t));
    let mut codel = codel_pipe(Some(Codel::default()), 1);
    let codel_run = drive(&mut codel, &arrivals(n, t));
    // Over the last ten seconds of arrivals.
    let last = |s: Vec<f64>| -> Vec<f64> {
        let k = s.len();
        s[k - 1_250..].to_vec()
    };
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let tail_delay = median(last(sojourns_ms(&tail_run, t)));
    let codel_delay = median(last(sojourns_ms(&codel_run, t)));
    let dropped = codel.counters().dropped(DropReason::Codel) as f64 / n as f64;
    eprintln!(
        "last 10 s, median sojourn: drop-tail {tail_delay:.1} ms, CoDel {codel_delay:.1} ms; \
         CoDel dropped {dropped:.3} of the packets"
    );
    assert!(
        tail_delay > 5_000.0,
        "drop-tail's queue grows: {tail_delay} ms"
    );
    assert!(
        codel_delay < 50.0,
        "CoDel holds the queue near its target: median {codel_delay} ms"
    );
    // It drops about the sixth that is too many, no more than a few
    // percent beyond.
    assert!(
        (0.15..0.19).contains(&dropped),
        "CoDel dropped {dropped:.3} of the packets"
    );
    assert_eq!(tail.counters().dropped_total(), 0);
    // The queue's state: CoDel has been dropping, the drop-tail pipe keeps
    // no CoDel state at all.
    assert!(codel.codel_state(FlowId(0)).is_some_and(|s| s.count() > 0));
    assert!(tail.codel_state(FlowId(0)).is_none());
}

#[test]
fn with_ecn_ect_packets_are_marked_and_the_others_dropped() {
    let codel = Codel {
        ecn: true,
        ..Codel::default()
    };
    let mut pipe = codel_pipe(Some(codel), 1);
    let mut arr = arrivals(400, |_| 0);
    for (_, p) in arr.iter_mut().filter(|(_, p)| p.token % 2 == 1) {
        *p = p.with_ect();
    }
    let run = drive(&mut pipe, &arr);
    let drops = codel_drops(&run);
    let marked: Vec<u64> = run
        .with_fate(Fate::Transmit)
        .filter(|e| e.packet.is_ce())
        .map(|e| e.packet.token)
        .collect();
    assert!(!drops.is_empty() && !marked.is_empty());
    assert!(drops.iter().all(|t| t % 2 == 0), "an ECT packet dropped");
    assert!(marked.iter().all(|t| t % 2 == 1), "a Not-ECT packet marked");
    assert_eq!(pipe.counters().marked, marked.len() as u64);
}

#[test]
fn codel_turned_on_live_lets_the_packets_already_queued_pass() {
    let mut pipe = codel_pipe(None, 1);
    // 100 packets queued before CoDel: none of them can be decided.
    for i in 0..100 {
        pipe.enqueue(at(0), Packet::new(FlowId(0), 1_000, i))
            .unwrap();
    }
    pipe.set_queue(
        FlowId(0),
        QueueConfig {
            limit: QueueLimit::Slots(10_000),
            codel: Some(Codel::default()),
            ..QueueConfig::default()
        },
    )
    .unwrap();
    // 100 more at 1 ms, whose sojourns are known.
    let run = drive(
        &mut pipe,
        &arrivals(200, |_| MS)
            .into_iter()
            .skip(100)
            .collect::<Vec<_>>(),
    );
    let drops = codel_drops(&run);
    assert!(
        drops.iter().all(|&t| t >= 100),
        "untimed packet decided: {drops:?}"
    );
    // The first timed packet starts at 800 ms after 799 ms in the queue:
    // droppable one interval after it, and the queue still long then.
    assert!(!drops.is_empty());
    let c = pipe.counters();
    assert_eq!(c.out_packets + c.dropped_total(), 200);
    // Off again: the times are still consumed, nothing more dropped.
    pipe.set_queue(
        FlowId(0),
        QueueConfig {
            limit: QueueLimit::Slots(10_000),
            ..QueueConfig::default()
        },
    )
    .unwrap();
    let later = 10_000 * MS;
    let run = drive(
        &mut pipe,
        &(0..200)
            .map(|i| (at(later), Packet::new(FlowId(0), 1_000, 1_000 + i)))
            .collect::<Vec<_>>(),
    );
    assert!(codel_drops(&run).is_empty());
    assert_eq!(pipe.queue_len(FlowId(0)), Some((0, 0)));
}

#[test]
fn a_removed_flow_leaves_no_stale_times() {
    let mut pipe = codel_pipe(Some(Codel::default()), 2);
    for i in 0..50 {
        pipe.enqueue(at(0), Packet::new(FlowId(1), 1_000, i))
            .unwrap();
    }
    let mut purged = 0;
    pipe.remove_flow(FlowId(1), &mut |_| purged += 1).unwrap();
    // One packet was already on the link.
    assert_eq!(purged, 49);
    pipe.add_flow(FlowId(1), FlowParams::default()).unwrap();
    // Much later, a short queue: had stale times from before been taken,
    // the sojourns would be seconds and CoDel would drop.
    let later = 10_000 * MS;
    let arr: Vec<_> = (0..2_000)
        .map(|i| {
            (
                at(later + (i / 2) * 16 * MS),
                Packet::new(FlowId(1), 1_000, 100 + i),
            )
        })
        .collect();
    let run = drive(&mut pipe, &arr);
    assert!(codel_drops(&run).is_empty());
}

#[test]
fn a_full_time_store_refuses_as_a_full_scheduler() {
    let mut pipe = fifo_pipe(
        PipeConfig {
            bw: Some(rate(1_000_000)),
            queue: QueueConfig {
                codel: Some(Codel::default()),
                ..QueueConfig::default()
            },
            held_capacity: 4,
            ..PipeConfig::default()
        },
        1,
        64,
    );
    // The first goes straight onto the link: five are held by the scheduler
    // and the link, four of them with their time.
    for i in 0..5 {
        pipe.enqueue(at(0), Packet::new(FlowId(0), 1_000, i))
            .unwrap();
    }
    let r = pipe
        .enqueue(at(0), Packet::new(FlowId(0), 1_000, 5))
        .unwrap_err();
    assert_eq!(r.reason, DropReason::QueueFull);
    assert_eq!(pipe.counters().dropped(DropReason::QueueFull), 1);
}

#[test]
fn codel_and_red_together_are_refused() {
    let q = QueueConfig {
        codel: Some(Codel::default()),
        red: Some(pspat_sched::pipe::Red {
            gentle: false,
            w_q: 0.002,
            min_th: 5,
            max_th: 15,
            max_p: 0.1,
        }),
        ..QueueConfig::default()
    };
    assert!(q.validate().is_err());
    assert!(QueueConfig {
        codel: Some(Codel {
            interval_ns: 0,
            ..Codel::default()
        }),
        ..QueueConfig::default()
    }
    .validate()
    .is_err());
}
