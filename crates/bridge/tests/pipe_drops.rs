//! Flows counted in groups ([`FlowCounters::Groups`]) behind a pipe that
//! drops: the pipe's drops are the runtime's (the transmitters never see
//! those packets, so they never count them finished), yet the flow keeps
//! going through and every frame is accounted for. In-process, inside a
//! namespace between a sender and a receiver namespace; needs root (else
//! prints "skipped: <reason>"). Run under the lab lock, one test at a time.

mod common;

use std::time::Duration;

use common::{numbered, send_all, Bed};
use pspat_bridge::FlowCounters;
use pspat_io::parse::FlowKeyKind;
use pspat_sched::pipe::{PipeConfig, QueueConfig};

#[test]
fn a_flow_the_pipe_drops_from_keeps_passing_when_counted_in_groups() {
    let Some(bed) = Bed::new() else {
        return;
    };
    let mut cfg = bed.config();
    cfg.flows = 2;
    cfg.flow_key = FlowKeyKind::DstPort;
    cfg.flow_counters = FlowCounters::Groups(1);
    // Counted per flow, the pipe's drops would use this limit up.
    cfg.queue_limit = 64;
    let pipe = PipeConfig {
        queue: QueueConfig {
            plr: 0.5,
            ..QueueConfig::default()
        },
        seed: 7,
        ..PipeConfig::default()
    };
    let bridge = bed.start_pipe(cfg, pipe);
    let receiver = bed.receiver();
    let mut tx = bed.sender_socket();
    let n = 1000u32;
    let frames: Vec<Vec<u8>> = (0..n).map(|seq| numbered(5000, seq, 200)).collect();
    let sent = send_all(&mut tx, &frames, 8, Duration::from_millis(1));
    // The pipe's drops show as in flight until the bridge stops: wait for
    // every frame to be received and the transmitted count to stay put.
    let mut last = bridge.report();
    loop {
        std::thread::sleep(Duration::from_millis(300));
        let now = bridge.report();
        if now.transmitted == last.transmitted && now.received + now.not_received >= sent {
            break;
        }
        last = now;
    }
    let report = bridge.stop().expect("stop");
    let (got, far_drops) = receiver.finish();
    println!(
        "sent {sent}, transmitted {}, dropped {:?}, far-end ring drops {far_drops}",
        report.transmitted, report.dropped
    );
    assert!(report.conserved, "{report:?}");
    assert_eq!(sent, u64::from(n));
    assert_eq!(report.received + report.not_received, sent, "{report:?}");
    assert_eq!(
        report.received,
        report.transmitted + report.dropped_total,
        "{report:?}"
    );
    assert_eq!(report.flows.len(), 1);
    assert_eq!(report.transmitted, got.len() as u64 + far_drops);
    // Each received frame passed the pipe with probability 0.5: within
    // 3.29 sd (two-sided 0.1%) of half of them, from the first frames to
    // the last.
    let r = report.received as f64;
    let (mean, sd) = (r * 0.5, (r * 0.25).sqrt());
    assert!(
        (report.transmitted as f64 - mean).abs() <= 3.29 * sd,
        "transmitted {} of {} received, expected {mean} ± {:.0}",
        report.transmitted,
        report.received,
        3.29 * sd
    );
    let last_seq = got.iter().map(|&(_, seq)| seq).max().unwrap_or(0);
    assert!(last_seq >= n - 20, "the last frame through was {last_seq}");
}
