//! The bridge with AF_XDP sockets (`BridgeConfig::io = IoBackend::Xdp`,
//! feature `xdp`), in-process inside a namespace between a sender and a
//! receiver namespace, each test with its own namespaces and veth pairs,
//! removed at its end. Each test needs root: without it, it prints
//! "skipped: <reason>" and returns. Run under the lab lock, one test at a
//! time:
//!
//! ```text
//! flock /tmp/pspat-lab.lock cargo test -p pspat-bridge --features xdp --test xdp -- --test-threads=1
//! ```
#![cfg(feature = "xdp")]

mod common;

use std::collections::BTreeMap;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{check_conserved_and_ordered, numbered, round_robin, send_all, send_and_stop, Bed};
use pspat_bridge::{BridgeConfig, BridgeError, IoBackend, XdpAttach};
use pspat_io::netns::Namespace;
use pspat_io::parse::FlowKeyKind;
use pspat_sched::pipe::{PipeConfig, QueueConfig, QueueLimit};
use pspat_sched::{AlgKind, SchedulerConfig};

/// The bed's configuration with AF_XDP in `attach` mode.
fn xdp_config(bed: &Bed, attach: XdpAttach) -> BridgeConfig {
    let mut cfg = bed.config();
    cfg.io = IoBackend::Xdp { attach };
    cfg
}

/// 4 flows of 3000 numbered 100-byte frames each through an AF_XDP bridge
/// at 200 Mbit/s with `dispatchers` dispatchers.
fn forward_and_count(attach: XdpAttach, dispatchers: usize) {
    let Some(bed) = Bed::new() else {
        return;
    };
    let mut cfg = xdp_config(&bed, attach);
    cfg.dispatchers = dispatchers;
    cfg.flows = 4;
    cfg.flow_key = FlowKeyKind::DstPort;
    cfg.rate_bps = Some(200_000_000);
    let bridge = bed.start(cfg);
    let receiver = bed.receiver();
    let mut tx = bed.sender_socket();
    let frames = round_robin(5000, 4, 3000, 100);
    let (report, sent) = send_and_stop(bridge, &mut tx, &frames, 32, Duration::from_micros(300));
    let (got, far_drops) = receiver.finish();
    println!(
        "{attach:?}, {dispatchers} dispatcher(s): sent {sent}, received {}, transmitted {}, \
         dropped {:?}, not received {}, far end {} (+{far_drops} ring drops)",
        report.received,
        report.transmitted,
        report.dropped,
        report.not_received,
        got.len()
    );
    check_conserved_and_ordered(&report, &got, sent, far_drops);
    let flows: std::collections::BTreeSet<u16> = got.iter().map(|(p, _)| *p).collect();
    assert_eq!(flows.len(), 4, "every flow arrived");
}

#[test]
fn every_frame_crosses_an_xdp_bridge_or_is_counted_and_flows_keep_their_order() {
    forward_and_count(XdpAttach::Auto, 1);
}

#[test]
fn the_skb_mode_program_and_an_arbiter_sending_itself_keep_count_and_order() {
    forward_and_count(XdpAttach::Skb, 0);
}

#[test]
fn a_duplicated_packet_leaves_twice_in_a_row_through_xdp() {
    let Some(bed) = Bed::new() else {
        return;
    };
    let mut cfg = xdp_config(&bed, XdpAttach::Auto);
    cfg.flows = 4;
    cfg.flow_key = FlowKeyKind::DstPort;
    let pipe = PipeConfig {
        delay_line_capacity: 8_192,
        queue: QueueConfig {
            limit: QueueLimit::Slots(100_000),
            duplicate: 1.0,
            ..QueueConfig::default()
        },
        seed: 7,
        ..PipeConfig::default()
    };
    let bridge = bed.start_pipe(cfg, pipe);
    let receiver = bed.receiver();
    let mut tx = bed.sender_socket();
    let frames = round_robin(5000, 4, 500, 200);
    let (report, sent) = send_and_stop(bridge, &mut tx, &frames, 16, Duration::from_micros(500));
    let (got, far_drops) = receiver.finish();
    assert!(report.conserved, "{report:?}");
    assert_eq!(
        (report.in_flight, report.dropped_total),
        (0, 0),
        "{report:?}"
    );
    assert_eq!(report.received, sent);
    assert_eq!(report.duplicated, sent);
    assert_eq!(report.transmitted, 2 * sent);
    assert_eq!(report.transmitted, got.len() as u64 + far_drops);
    if far_drops == 0 {
        let mut by_flow: BTreeMap<u16, Vec<u32>> = BTreeMap::new();
        for (port, seq) in &got {
            by_flow.entry(*port).or_default().push(*seq);
        }
        for (port, seqs) in by_flow {
            let want: Vec<u32> = (0..500).flat_map(|s| [s, s]).collect();
            assert_eq!(
                seqs, want,
                "flow {port}: each frame twice in a row, in order"
            );
        }
    }
}

/// Bytes `interface` in namespace `ns` sent (its `tx_bytes`: frames
/// without FCS, the unit the rate charges).
fn tx_bytes(ns: &Namespace, interface: &str) -> u64 {
    let output = Command::new("ip")
        .args([
            "-n",
            ns.name(),
            "-s",
            "-j",
            "link",
            "show",
            "dev",
            interface,
        ])
        .output()
        .expect("run ip -s link show");
    assert!(output.status.success(), "ip -s link show {interface}");
    let links: serde_json::Value = serde_json::from_slice(&output.stdout).expect("ip's JSON");
    links[0]["stats64"]["tx"]["bytes"]
        .as_u64()
        .expect("tx bytes in ip's JSON")
}

#[test]
fn a_10_mbit_link_sends_within_1_percent_of_its_rate_through_xdp() {
    let Some(bed) = Bed::new() else {
        return;
    };
    let rate = 10_000_000u64;
    let mut cfg = xdp_config(&bed, XdpAttach::Auto);
    cfg.sched = SchedulerConfig::new(AlgKind::Drr);
    cfg.rate_bps = Some(rate);
    cfg.drain = Duration::from_millis(200);
    let bridge = bed.start(cfg);
    let mut tx = bed.sender_socket();
    // One flow offering 15 Mbit/s of 1000-byte frames, paced by the clock
    // (a sender slowed by a busy machine catches up): a backlog always
    // waits.
    let stop = Arc::new(AtomicBool::new(false));
    let sender = {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || {
            let fps = 1.5 * rate as f64 / 8000.0;
            let start = Instant::now();
            let mut seq = 0u32;
            while !stop.load(Ordering::Acquire) {
                let due = (start.elapsed().as_secs_f64() * fps) as u32;
                seq = seq.max(due.saturating_sub(256));
                let n = due.saturating_sub(seq).min(32);
                if n == 0 {
                    std::thread::sleep(Duration::from_millis(1));
                    continue;
                }
                let frames: Vec<Vec<u8>> = (0..n).map(|i| numbered(7000, seq + i, 1000)).collect();
                seq += n;
                send_all(&mut tx, &frames, 32, Duration::ZERO);
            }
        })
    };
    let out = bed.out.a.clone();
    std::thread::sleep(Duration::from_millis(1500));
    let (a, ta) = (tx_bytes(&bed.bridge, &out), Instant::now());
    std::thread::sleep(Duration::from_secs(3));
    let (b, tb) = (tx_bytes(&bed.bridge, &out), Instant::now());
    stop.store(true, Ordering::Release);
    sender.join().expect("sender");
    let report = bridge.stop().expect("stop");
    assert!(report.conserved, "{report:?}");
    assert_eq!(report.in_flight, 0);
    assert!(report.error.is_none(), "{:?}", report.error);
    let shaped = (b - a) as f64 * 8.0 / (tb - ta).as_secs_f64();
    let error = shaped / rate as f64 - 1.0;
    println!(
        "shaped {shaped:.0} bit/s at the output for {rate} bit/s: {:+.3}%",
        error * 100.0
    );
    assert!(error.abs() <= 0.01, "shaped {shaped:.0} bit/s, want {rate}");
    let limited = report.flows[0]
        .dropped
        .get("flow_limit")
        .copied()
        .unwrap_or(0);
    assert!(limited > 0, "the flow was backlogged: {report:?}");
}

/// Which interface a removal test takes away.
#[derive(Debug, Clone, Copy)]
enum Removed {
    Input,
    Output,
}

/// Sends 1000 frames through an AF_XDP bridge, removes one of its
/// interfaces, and checks that the run ends with one clear line and
/// counters that add up.
fn removed_mid_run(which: Removed) {
    let Some(bed) = Bed::new() else {
        return;
    };
    let mut cfg = xdp_config(&bed, XdpAttach::Auto);
    cfg.flows = 2;
    cfg.rate_bps = Some(50_000_000);
    let bridge = bed.start(cfg);
    let mut tx = bed.sender_socket();
    let frames: Vec<Vec<u8>> = (0..2000u32).map(|s| numbered(8000, s, 200)).collect();
    let mut sent = send_all(&mut tx, &frames[..1000], 32, Duration::from_micros(500));
    match which {
        Removed::Input => {
            // Everything sent so far is in (or past) the bridge; nothing
            // can be sent after the pair is gone.
            common::settle(&bridge, sent, Duration::from_secs(5));
            bed.into.remove().expect("remove the input pair");
        }
        Removed::Output => {
            bed.out.remove().expect("remove the output pair");
            sent += send_all(&mut tx, &frames[1000..], 32, Duration::from_micros(500));
        }
    }
    let report = common::stop_after_removal(bridge, sent);
    println!("{which:?} removed: {:?}", report.error);
    if let Removed::Output = which {
        assert!(report.transmitted < report.received, "{report:?}");
    }
    common::remove_and_check(bed);
}

#[test]
fn a_removed_input_interface_ends_an_xdp_run_cleanly() {
    removed_mid_run(Removed::Input);
}

#[test]
fn a_removed_output_interface_ends_an_xdp_run_cleanly() {
    removed_mid_run(Removed::Output);
}

#[test]
fn one_socket_per_queue_is_a_configuration_error() {
    let field = |cfg: BridgeConfig| match cfg.validate() {
        Err(BridgeError::Config { field, .. }) => field,
        other => panic!("expected a configuration error, got {other:?}"),
    };
    let xdp = |rx_threads: usize, dispatchers: usize| {
        let mut cfg = BridgeConfig::new("pspat-in", "pspat-out");
        cfg.io = IoBackend::Xdp {
            attach: XdpAttach::Auto,
        };
        cfg.rx_threads = rx_threads;
        cfg.dispatchers = dispatchers;
        cfg
    };
    assert!(xdp(1, 0).validate().is_ok());
    assert!(xdp(1, 1).validate().is_ok());
    assert_eq!(field(xdp(2, 1)), "rx_threads");
    assert_eq!(field(xdp(1, 2)), "dispatchers");
}
