//! The bridge end to end, running in-process inside a namespace between a
//! sender and a receiver namespace. Each test needs root: without it, it
//! prints "skipped: <reason>" and returns.

mod common;

#[path = "../../io/tests/common/mod.rs"]
mod frames;

use std::collections::BTreeMap;
use std::time::Duration;

use common::{
    check_conserved_and_ordered, numbered, remove_and_check, round_robin, send_all, send_and_stop,
    settle, stop_after_removal, Bed,
};
use pspat_bridge::{BridgeConfig, TxKind, Unparsed, Verdict};
use pspat_io::parse::{FlowKey, FlowKeyKind, ParseError, ParseReason};
use pspat_io::RxRing;
use pspat_sched::{AlgKind, FlowId, SchedulerConfig};

#[test]
fn every_frame_is_forwarded_or_counted_and_flows_keep_their_order() {
    forward_and_count(1, 1, TxKind::Sendmmsg, RxRing::V2);
}

#[test]
fn two_rx_threads_two_dispatchers_and_the_tx_ring_keep_count_and_order() {
    forward_and_count(2, 2, TxKind::Ring, RxRing::V2);
}

#[test]
fn the_v3_block_ring_keeps_count_and_order_too() {
    forward_and_count(1, 1, TxKind::Sendmmsg, RxRing::V3);
}

#[test]
fn two_rx_threads_on_v3_rings_keep_count_and_order() {
    forward_and_count(2, 1, TxKind::Sendmmsg, RxRing::V3);
}

fn forward_and_count(rx_threads: usize, dispatchers: usize, tx_kind: TxKind, ring: RxRing) {
    let Some(bed) = Bed::new() else {
        return;
    };
    let mut cfg = bed.config();
    cfg.rx_threads = rx_threads;
    cfg.dispatchers = dispatchers;
    cfg.tx = tx_kind;
    cfg.rx_ring = ring;
    cfg.flows = 4;
    cfg.flow_key = FlowKeyKind::DstPort;
    cfg.rate_bps = Some(200_000_000);
    let bridge = bed.start(cfg);
    let receiver = bed.receiver();
    let mut tx = bed.sender_socket();
    let frames = round_robin(5000, 4, 3000, 100);
    let (report, sent) = send_and_stop(bridge, &mut tx, &frames, 32, Duration::from_micros(300));
    let (got, far_kernel_drops) = receiver.finish();
    // Conservation across the bridge (what the sender sent arrived at the
    // far end or was counted dropped somewhere) and each flow's order.
    let flows = check_conserved_and_ordered(&report, &got, sent, far_kernel_drops);
    assert_eq!(flows, 4, "every flow arrived");
}

#[test]
fn weighted_greedy_senders_get_their_shares_under_overload() {
    let Some(bed) = Bed::new() else {
        return;
    };
    let weights = [1u32, 2, 3, 4];
    let mut cfg = bed.config();
    cfg.flows = 4;
    cfg.flow_key = FlowKeyKind::DstPort;
    cfg.weights = weights.to_vec();
    cfg.sched = SchedulerConfig::new(AlgKind::Drr);
    cfg.rate_bps = Some(20_000_000);
    cfg.drain = Duration::from_millis(200);
    let bridge = bed.start(cfg);
    let mut tx = bed.sender_socket();
    // Each flow offers 20 Mbit/s of 1000-byte frames (80 in all on a
    // 20 Mbit/s link): every flow wants more than its share. The pace
    // follows the clock, so a sender slowed by a busy machine catches up.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let sender = {
        let stop = std::sync::Arc::clone(&stop);
        std::thread::spawn(move || {
            let per_flow_fps = 2500.0;
            let start = std::time::Instant::now();
            let mut seq = 0u32;
            while !stop.load(std::sync::atomic::Ordering::Acquire) {
                let due = (start.elapsed().as_secs_f64() * per_flow_fps) as u32;
                seq = seq.max(due.saturating_sub(256));
                let n = due.saturating_sub(seq).min(32);
                if n == 0 {
                    std::thread::sleep(Duration::from_millis(1));
                    continue;
                }
                let frames: Vec<Vec<u8>> = (0..n)
                    .flat_map(|i| (0..4u16).map(move |f| numbered(6000 + f, seq + i, 1000)))
                    .collect();
                seq += n;
                send_all(&mut tx, &frames, 32, Duration::ZERO);
            }
        })
    };
    std::thread::sleep(Duration::from_millis(1500));
    let a = bridge.report();
    std::thread::sleep(Duration::from_millis(3000));
    let b = bridge.report();
    stop.store(true, std::sync::atomic::Ordering::Release);
    sender.join().expect("sender");
    let report = bridge.stop().expect("stop");
    assert!(report.conserved, "{report:?}");
    let bytes: Vec<u64> = (0..4)
        .map(|f| b.flows[f].bytes - a.flows[f].bytes)
        .collect();
    let total: u64 = bytes.iter().sum();
    let wsum: u32 = weights.iter().sum();
    for f in 0..4 {
        let share = bytes[f] as f64 / total as f64;
        let expected = f64::from(weights[f]) / f64::from(wsum);
        println!("flow {f}: share {share:.4}, expected {expected:.4}");
        assert!(
            (share / expected - 1.0).abs() <= 0.02,
            "flow {f}: share {share:.4}, expected {expected:.4} ({bytes:?})"
        );
        assert!(
            report.flows[f]
                .dropped
                .get("flow_limit")
                .copied()
                .unwrap_or(0)
                > 0,
            "flow {f} was backlogged (its queue overflowed)"
        );
    }
}

#[test]
fn malformed_frames_are_counted_under_their_reasons() {
    let Some(bed) = Bed::new() else {
        return;
    };
    // Jumbo frames can reach the bridge; the output stays at 1500.
    bed.sender
        .ip(&["link", "set", &bed.into.a, "mtu", "9000"])
        .unwrap();
    bed.bridge
        .ip(&["link", "set", &bed.into.b, "mtu", "9000"])
        .unwrap();
    let mut cfg = bed.config();
    cfg.unparsed = Unparsed::Drop;
    cfg.flows = 2;
    let bridge = bed.start(cfg);
    let receiver = bed.receiver();
    let mut tx = bed.sender_socket();
    // As in pspat-io's own wire test: frames shorter than an Ethernet
    // header and cut VLAN tags do not survive the sending kernel.
    let cases: Vec<_> = frames::malformed()
        .into_iter()
        .filter(|(_, _, r)| {
            !matches!(
                r,
                ParseReason::TruncatedEthernet | ParseReason::TruncatedVlan
            )
        })
        .collect();
    let mut expected: BTreeMap<String, u64> = BTreeMap::new();
    let mut all = Vec::new();
    for _ in 0..3 {
        for (_, frame, reason) in &cases {
            all.push(frame.clone());
            // Above the output's MTU: refused before parsing.
            let name = match reason {
                ParseReason::OversizeFrame => "too_long",
                r => r.counter_name(),
            };
            *expected.entry(name.to_string()).or_default() += 1;
        }
    }
    // Valid frames, one in three with a VLAN tag: forwarded.
    let mut valid = 0u64;
    for seq in 0..30u32 {
        let mut frame = numbered(7000, seq, 80);
        if seq % 3 == 0 {
            frame.splice(12..12, [0x81, 0x00, 0x00, 0x0a]);
        }
        all.push(frame);
        valid += 1;
    }
    let sent = send_all(&mut tx, &all, 16, Duration::from_millis(1));
    assert_eq!(sent, all.len() as u64);
    settle(&bridge, sent, Duration::from_secs(5));
    std::thread::sleep(Duration::from_millis(100));
    let report = bridge.stop().expect("stop");
    let (got, _) = receiver.finish();
    assert!(report.conserved, "{report:?}");
    assert_eq!(report.received, sent);
    assert_eq!(report.dropped, expected, "{report:?}");
    assert_eq!(report.transmitted, valid);
    assert_eq!(
        got.len() as u64,
        valid,
        "the valid frames crossed, tags and all"
    );
}

#[test]
fn a_removed_output_interface_ends_the_run_cleanly() {
    let Some(bed) = Bed::new() else {
        return;
    };
    let mut cfg = bed.config();
    cfg.flows = 2;
    cfg.rate_bps = Some(50_000_000);
    let bridge = bed.start(cfg);
    let mut tx = bed.sender_socket();
    let frames: Vec<Vec<u8>> = (0..2000u32).map(|s| numbered(8000, s, 200)).collect();
    let mut sent = send_all(&mut tx, &frames[..1000], 32, Duration::from_micros(500));
    bed.out.remove().expect("remove the output pair");
    sent += send_all(&mut tx, &frames[1000..], 32, Duration::from_micros(500));
    let report = stop_after_removal(bridge, sent);
    assert!(report.transmitted < report.received);
    remove_and_check(bed);
}

#[test]
fn a_plugged_in_classifier_filters_and_its_bad_flows_are_counted() {
    let Some(bed) = Bed::new() else {
        return;
    };
    let mut cfg = bed.config();
    cfg.flows = 2;
    let bridge = bed.start_with(cfg, |_| {
        |_frame: &[u8], key: Result<&FlowKey, &ParseError>| match key.map(|k| k.dst_port) {
            Ok(9001) => Verdict::Filtered,
            Ok(9002) => Verdict::Flow(FlowId(99)),
            Ok(port) => Verdict::Flow(FlowId(u32::from(port % 2))),
            Err(e) => Verdict::Unparsed(e.reason),
        }
    });
    assert!(
        promiscuous(&bed),
        "the RX socket put the input in promiscuous mode"
    );
    let receiver = bed.receiver();
    let mut tx = bed.sender_socket();
    let frames: Vec<Vec<u8>> = (0..30u32)
        .map(|s| numbered(9000 + (s % 3) as u16, s, 64))
        .collect();
    let sent = send_all(&mut tx, &frames, 8, Duration::from_millis(1));
    settle(&bridge, sent, Duration::from_secs(5));
    std::thread::sleep(Duration::from_millis(100));
    let report = bridge.stop().expect("stop");
    let (got, _) = receiver.finish();
    assert!(report.conserved, "{report:?}");
    let expected: BTreeMap<String, u64> =
        [("bad_flow".to_string(), 10), ("filtered".to_string(), 10)].into();
    assert_eq!(report.dropped, expected);
    assert_eq!(report.transmitted, 10);
    assert_eq!(report.flows[0].received, 10, "port 9000 in flow 0");
    assert!(got.iter().all(|(port, _)| *port == 9000));
    assert_eq!(got.len(), 10);
    assert!(!promiscuous(&bed), "closing the sockets undid it");
}

/// Whether the bridge's input interface is in promiscuous mode now.
fn promiscuous(bed: &Bed) -> bool {
    let out = std::process::Command::new("ip")
        .args(["-n", bed.bridge.name(), "-d", "-o", "link", "show", "dev"])
        .arg(&bed.into.b)
        .output()
        .expect("ip runs");
    // `promiscuity N`: the kernel's count of promiscuous-mode requests
    // (the PROMISC flag shows only the administrator's own request).
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let count = text
        .split_whitespace()
        .skip_while(|w| *w != "promiscuity")
        .nth(1)
        .and_then(|n| n.parse::<u32>().ok());
    count.expect("ip -d shows the promiscuity count") > 0
}

#[test]
fn bad_configurations_name_their_field() {
    let mut cfg = BridgeConfig::new("pspat-x", "pspat-x");
    assert!(cfg
        .validate()
        .unwrap_err()
        .to_string()
        .starts_with("output: "));
    cfg.output = "pspat-y".into();
    cfg.flows = 0;
    assert!(cfg
        .validate()
        .unwrap_err()
        .to_string()
        .starts_with("flows: "));
    cfg.flows = 3;
    cfg.weights = vec![1, 2];
    assert!(cfg
        .validate()
        .unwrap_err()
        .to_string()
        .starts_with("weights: "));
    cfg.weights = vec![1, 2, 0];
    assert!(cfg
        .validate()
        .unwrap_err()
        .to_string()
        .starts_with("weights: "));
    cfg.weights.clear();
    cfg.rate_bps = Some(0);
    assert!(cfg
        .validate()
        .unwrap_err()
        .to_string()
        .starts_with("rate: "));
    cfg.rate_bps = None;
    cfg.descriptors = 100;
    assert!(cfg
        .validate()
        .unwrap_err()
        .to_string()
        .starts_with("descriptors: "));
    cfg.descriptors = 4096;
    assert!(cfg.validate().is_ok());
}

#[test]
fn a_shaped_reverse_direction_is_forwarded_and_counted_apart() {
    let Some(bed) = Bed::new() else {
        return;
    };
    let mut cfg = bed.config();
    cfg.rx_threads = 2;
    cfg.shape_reverse = true;
    cfg.flows = 4;
    cfg.flow_key = FlowKeyKind::DstPort;
    cfg.rate_bps = Some(200_000_000);
    let bridge = bed.start(cfg);
    // Receivers at both ends; each keeps the frames of its direction.
    let far = bed.receiver();
    let near = common::receiver_on(&bed.sender, &bed.into.a);
    let mut fwd_tx = bed.sender_socket();
    let mut rev_tx = bed
        .receiver
        .run(|| pspat_io::PacketTx::open(&bed.out.b, &pspat_io::TxConfig::default()))
        .unwrap()
        .expect("open the reverse sender");
    let per_flow = 2000u32;
    let frames = |ports: [u16; 2]| -> Vec<Vec<u8>> {
        (0..per_flow)
            .flat_map(|seq| ports.map(move |p| numbered(p, seq, 100)))
            .collect()
    };
    let (fwd, rev) = (frames([5000, 5001]), frames([6002, 6003]));
    let mut sent = [0u64; 2];
    for (chunk_f, chunk_r) in fwd.chunks(400).zip(rev.chunks(400)) {
        sent[0] += send_all(&mut fwd_tx, chunk_f, 32, Duration::from_micros(300));
        sent[1] += send_all(&mut rev_tx, chunk_r, 32, Duration::from_micros(300));
    }
    assert_eq!(sent, [fwd.len() as u64, rev.len() as u64]);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let r = bridge.report();
        let done = r.received + r.not_received >= sent[0]
            && r.reverse.received + r.reverse.not_received >= sent[1]
            && r.in_flight == 0
            && r.reverse.in_flight == 0;
        if done || std::time::Instant::now() > deadline {
            assert!(r.conserved, "{r:?}");
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(200));
    let report = bridge.stop().expect("stop");
    let keep = |got: Vec<(u16, u32)>, ports: [u16; 2]| -> Vec<(u16, u32)> {
        got.into_iter().filter(|(p, _)| ports.contains(p)).collect()
    };
    let (got_f, drops_f) = far.finish();
    let (got_r, drops_r) = near.finish();
    let (got_f, got_r) = (keep(got_f, [5000, 5001]), keep(got_r, [6002, 6003]));
    assert!(report.conserved && report.in_flight == 0, "{report:?}");
    assert!(report.error.is_none(), "{:?}", report.error);
    let r = &report.reverse;
    assert!(r.enabled && r.shaped && r.conserved, "{r:?}");
    assert_eq!(r.in_flight, 0);
    assert_eq!(r.received, r.transmitted + r.dropped_total, "{r:?}");
    // Each direction alone: what was sent arrived or was counted.
    assert_eq!(report.received + report.not_received, sent[0]);
    assert_eq!(r.received + r.not_received, sent[1]);
    assert_eq!(report.transmitted, got_f.len() as u64 + drops_f);
    assert_eq!(r.transmitted, got_r.len() as u64 + drops_r);
    assert!(got_f.len() as u64 >= sent[0] * 9 / 10, "{}", got_f.len());
    assert!(got_r.len() as u64 >= sent[1] * 9 / 10, "{}", got_r.len());
    // The forward report's flows are the forward direction's.
    let per_flow_received: u64 = report.flows.iter().map(|f| f.received).sum();
    assert_eq!(per_flow_received, report.received);
    assert!(report.threads.iter().any(|t| t.thread == "rx-reverse-1"));
    for got in [&got_f, &got_r] {
        let mut last: BTreeMap<u16, u32> = BTreeMap::new();
        for (port, seq) in got {
            if let Some(prev) = last.insert(*port, *seq) {
                assert!(*seq > prev, "flow {port}: {seq} after {prev}");
            }
        }
        assert_eq!(last.len(), 2, "both flows arrived");
    }
}

#[test]
fn a_switched_reverse_direction_counts_every_frame_in_either_mode() {
    let Some(bed) = Bed::new() else {
        return;
    };
    let switch = pspat_bridge::ReverseSwitch::new(false);
    let mut cfg = bed.config();
    cfg.shape_reverse = true;
    cfg.reverse_switch = Some(switch.clone());
    cfg.flows = 4;
    cfg.flow_key = FlowKeyKind::DstPort;
    let bridge = bed.start(cfg);
    let near = common::receiver_on(&bed.sender, &bed.into.a);
    let mut rev_tx = bed
        .receiver
        .run(|| pspat_io::PacketTx::open(&bed.out.b, &pspat_io::TxConfig::default()))
        .unwrap()
        .expect("open the reverse sender");
    let frames =
        |port: u16, n: u32| -> Vec<Vec<u8>> { (0..n).map(|s| numbered(port, s, 100)).collect() };
    // Waits until the bridge took every frame sent so far.
    let settle = |sent: u64| {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            let r = bridge.report();
            let v = &r.reverse;
            if (v.received + v.not_received >= sent && v.in_flight == 0)
                || std::time::Instant::now() > deadline
            {
                assert!(v.conserved, "{v:?}");
                return r;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    let mut sent = send_all(
        &mut rev_tx,
        &frames(6000, 300),
        32,
        Duration::from_micros(300),
    );
    let off = settle(sent);
    assert!(!off.reverse.shaped, "{:?}", off.reverse);
    assert_eq!(off.reverse.received, off.reverse.received_unshaped);
    assert!(off.reverse.received > 0);
    assert!(switch.set(true));
    // Every frame read from now on is shaped: no wait.
    sent += send_all(
        &mut rev_tx,
        &frames(6001, 300),
        32,
        Duration::from_micros(300),
    );
    let on = settle(sent);
    assert!(on.reverse.shaped);
    assert_eq!(on.reverse.received_unshaped, off.reverse.received_unshaped);
    assert!(
        on.reverse.received > off.reverse.received,
        "{:?}",
        on.reverse
    );
    assert!(switch.set(false));
    sent += send_all(
        &mut rev_tx,
        &frames(6002, 300),
        32,
        Duration::from_micros(300),
    );
    settle(sent);
    std::thread::sleep(Duration::from_millis(200));
    let report = bridge.stop().expect("stop");
    let (got, drops) = near.finish();
    let got: Vec<_> = got
        .into_iter()
        .filter(|(p, _)| (6000..=6002).contains(p))
        .collect();
    let r = &report.reverse;
    assert!(report.conserved, "{report:?}");
    assert!(r.enabled && !r.shaped && r.conserved, "{r:?}");
    assert_eq!(r.toggles, 2);
    assert_eq!(r.in_flight, 0);
    assert_eq!(r.received + r.not_received, sent, "{r:?}");
    assert_eq!(r.received, r.transmitted + r.dropped_total, "{r:?}");
    assert_eq!(r.transmitted, got.len() as u64 + drops);
    // The shaped frames alone went through the runtime's flows.
    assert!(r.received_unshaped > off.reverse.received_unshaped, "{r:?}");
    assert!(r.received_unshaped < r.received, "{r:?}");
    for port in 6000..=6002 {
        assert!(got.iter().any(|(p, _)| *p == port), "port {port} arrived");
    }
}

/// An idle bridge's RX and reverse threads wait up to a second at a time
/// for frames; a stop ends those waits at once (the bridge's stop latch),
/// so stopping takes far less than a wait. Two RX threads and a shaped
/// reverse direction: five threads waiting on rings.
#[test]
fn an_idle_bridge_stops_without_waiting_for_its_rx_threads_timeouts() {
    let Some(bed) = Bed::new() else {
        return;
    };
    let mut took = Vec::new();
    for _ in 0..3 {
        let mut cfg = bed.config();
        cfg.rx_threads = 2;
        cfg.shape_reverse = true;
        let bridge = bed.start(cfg);
        // Every thread is in its wait by now.
        std::thread::sleep(Duration::from_millis(100));
        let begun = std::time::Instant::now();
        let report = bridge.stop().expect("stop");
        took.push(begun.elapsed());
        assert_eq!(report.in_flight, 0);
    }
    took.sort();
    println!("idle bridge stopped in {took:?}");
    // The median: without the latch a stop waits for the threads' next
    // timeout, 0.9 s on average after a 100 ms sleep.
    assert!(took[1] < Duration::from_millis(400), "{took:?}");
}
