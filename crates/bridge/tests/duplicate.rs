//! A pipe's `duplicate` through the bridge: a packet the pipe marks is sent
//! twice on the output interface, the copy right after the original, and
//! counted `duplicated` so that `received + duplicated = transmitted +
//! dropped + in_flight`. In-process, inside a namespace between a sender
//! and a receiver namespace; needs root (else prints "skipped: <reason>").
//! Run under the lab lock, one test at a time (fixed interface names).

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::{round_robin, send_and_stop, Bed};
use pspat_bridge::{BridgeConfig, FlowCounters, Report, TxKind};
use pspat_io::parse::FlowKeyKind;
use pspat_sched::pipe::{PipeConfig, QueueConfig, QueueLimit};

/// The final report, the `(flow, seq)` the receiver got in arrival order,
/// the frames sent and the receiver's kernel ring drops.
type Outcome = (Report, Vec<(u16, u32)>, u64, u64);

/// Sends `per_flow` numbered frames on each of 4 flows through a FIFO pipe
/// duplicating with probability `p`, the bridge counting them by
/// `counters` (`None` without root).
fn run(p: f64, tx: TxKind, per_flow: u32, counters: FlowCounters) -> Option<Outcome> {
    let bed = Bed::new()?;
    let mut cfg: BridgeConfig = bed.config();
    cfg.flows = 4;
    cfg.flow_counters = counters;
    cfg.flow_key = FlowKeyKind::DstPort;
    cfg.tx = tx;
    let pipe_cfg = PipeConfig {
        delay_line_capacity: 8_192,
        queue: QueueConfig {
            limit: QueueLimit::Slots(100_000),
            duplicate: p,
            ..QueueConfig::default()
        },
        seed: 99,
        ..PipeConfig::default()
    };
    let bridge = bed.start_pipe(cfg, pipe_cfg);
    let receiver = bed.receiver();
    let mut sock = bed.sender_socket();
    let frames = round_robin(5000, 4, per_flow, 200);
    let (report, sent) = send_and_stop(bridge, &mut sock, &frames, 16, Duration::from_micros(500));
    let (got, far_drops) = receiver.finish();
    Some((report, got, sent, far_drops))
}

/// Checks the accounting of a run and returns how many frames arrived as
/// a copy (the same `(flow, seq)` right after itself).
fn check(report: &Report, got: &[(u16, u32)], sent: u64, far_drops: u64) -> u64 {
    assert!(report.conserved, "{report:?}");
    assert_eq!(
        (report.in_flight, report.dropped_total),
        (0, 0),
        "{report:?}"
    );
    assert_eq!(report.received, sent);
    // Every frame received and every copy went out.
    assert_eq!(report.transmitted, report.received + report.duplicated);
    assert_eq!(report.transmitted, got.len() as u64 + far_drops);
    let per_flow: u64 = report.flows.iter().map(|f| f.duplicated).sum();
    assert_eq!(per_flow, report.duplicated);
    for f in &report.flows {
        assert_eq!(f.received + f.duplicated, f.transmitted, "flow {}", f.flow);
    }
    // Per flow, the sequence numbers arrive in order, each once or twice
    // in a row (the copy right behind its original).
    let mut by_flow: BTreeMap<u16, Vec<u32>> = BTreeMap::new();
    for (port, seq) in got {
        by_flow.entry(*port).or_default().push(*seq);
    }
    let mut copies = 0u64;
    for (port, seqs) in &by_flow {
        for w in seqs.windows(2) {
            assert!(w[1] >= w[0], "flow {port}: {} after {}", w[1], w[0]);
            if w[1] == w[0] {
                copies += 1;
            }
        }
        let mut run = 1;
        for w in seqs.windows(2) {
            run = if w[1] == w[0] { run + 1 } else { 1 };
            assert!(run <= 2, "flow {port}: {} three times", w[0]);
        }
    }
    copies
}

#[test]
fn duplicate_one_sends_every_frame_twice_in_a_row() {
    let Some((report, got, sent, far_drops)) =
        run(1.0, TxKind::Sendmmsg, 500, FlowCounters::PerFlow)
    else {
        return;
    };
    let copies = check(&report, &got, sent, far_drops);
    assert_eq!(report.duplicated, sent);
    assert_eq!(report.transmitted, 2 * sent);
    if far_drops == 0 {
        assert_eq!(copies, sent);
    }
}

#[test]
fn duplicated_frames_are_sent_twice_and_counted_on_both_senders() {
    for tx in [TxKind::Sendmmsg, TxKind::Ring] {
        let Some((report, got, sent, far_drops)) = run(0.2, tx, 500, FlowCounters::PerFlow) else {
            return;
        };
        let copies = check(&report, &got, sent, far_drops);
        println!(
            "{tx:?}: {sent} frames, duplicated {}, transmitted {}, copies received {copies}, far-end ring drops {far_drops}",
            report.duplicated, report.transmitted
        );
        // duplicate 0.2 over 2000 frames: within the 99.9% interval.
        let (mean, sd) = (sent as f64 * 0.2, (sent as f64 * 0.2 * 0.8).sqrt());
        assert!(
            (report.duplicated as f64 - mean).abs() <= 3.2905 * sd,
            "{tx:?}: {} copies of {sent}, expected {mean} ± {:.0}",
            report.duplicated,
            3.2905 * sd
        );
        if far_drops == 0 {
            assert_eq!(copies, report.duplicated, "{tx:?}");
        }
    }
}

#[test]
fn flows_counted_in_groups_keep_every_frame_and_copy_accounted() {
    // 4 flows in 3 groups: flows 0 and 3 share group 0.
    let Some((report, got, sent, far_drops)) =
        run(0.5, TxKind::Sendmmsg, 500, FlowCounters::Groups(3))
    else {
        return;
    };
    check(&report, &got, sent, far_drops);
    assert_eq!(
        report.flows.iter().map(|f| f.flow).collect::<Vec<_>>(),
        [0, 1, 2]
    );
    let received: Vec<u64> = report.flows.iter().map(|f| f.received).collect();
    assert_eq!(received, [1000, 500, 500]);
    assert_eq!(report.flows[0].weight, 2);
    assert_eq!(report.egress.len(), 1);
    assert_eq!(report.egress[0].flows, 4);
    assert_eq!(report.egress[0].transmitted, report.transmitted);
    assert!(report.duplicated > 0, "{report:?}");
}
