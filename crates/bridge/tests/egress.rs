//! A bridge with several egress interfaces (a "bond of veths"): a sender
//! namespace, the bridge's namespace and a sink namespace joined by one
//! input pair and two output pairs. Flows are placed on the output pairs by
//! weighted HRW on their rates. Each test needs root: without it, it prints
//! "skipped: <reason>" and returns.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use common::{numbered, receiver_on, round_robin, send_all, send_and_stop, settle, Receiver};
use pspat_bridge::{Bridge, BridgeConfig, Egress, Report};
use pspat_io::af_packet::{PacketTx, TxConfig};
use pspat_io::netns::{self, Namespace, VethPair};
use pspat_io::parse::FlowKeyKind;

struct Bond {
    // Dropped in this order: pairs, then namespaces.
    into: VethPair,
    outs: Vec<VethPair>,
    sender: Namespace,
    bridge: Namespace,
    sink: Namespace,
}

impl Bond {
    fn new(links: usize) -> Option<Bond> {
        if let Some(reason) = netns::unavailable() {
            println!("skipped: {reason}");
            return None;
        }
        let sender = Namespace::create().expect("sender namespace");
        let bridge = Namespace::create().expect("bridge namespace");
        let sink = Namespace::create().expect("sink namespace");
        let into = VethPair::create(&sender, &bridge).expect("input pair");
        let outs = (0..links)
            .map(|_| VethPair::create(&bridge, &sink).expect("output pair"))
            .collect();
        Some(Bond {
            into,
            outs,
            sender,
            bridge,
            sink,
        })
    }

    /// A bridge from the input pair to every output pair, with these rates.
    fn config(&self, rates: &[u64]) -> BridgeConfig {
        let mut cfg = BridgeConfig::new(self.into.b.clone(), self.outs[0].a.clone());
        cfg.rate_bps = Some(rates[0]);
        for (out, &rate) in self.outs.iter().zip(rates).skip(1) {
            let mut e = Egress::new(out.a.clone());
            e.rate_bps = Some(rate);
            cfg.extra_outputs.push(e);
        }
        cfg
    }

    fn start(&self, cfg: BridgeConfig) -> Bridge {
        self.bridge
            .run(|| Bridge::start(cfg))
            .expect("enter the bridge namespace")
            .expect("start the bridge")
    }

    fn sender_socket(&self) -> PacketTx {
        self.sender
            .run(|| PacketTx::open(&self.into.a, &TxConfig::default()))
            .unwrap()
            .expect("open the sender")
    }

    /// One receiver per output pair, on its sink end.
    fn receivers(&self) -> Vec<Receiver> {
        self.outs
            .iter()
            .map(|p| receiver_on(&self.sink, &p.b))
            .collect()
    }
}

/// Per egress interface (by the bridge's name for it): the numbered frames
/// its sink end saw, and that ring's kernel drops.
fn finish(bond: &Bond, receivers: Vec<Receiver>) -> BTreeMap<String, (Vec<(u16, u32)>, u64)> {
    bond.outs
        .iter()
        .zip(receivers)
        .map(|(p, r)| (p.a.clone(), r.finish()))
        .collect()
}

fn check_final(report: &Report) {
    assert!(report.conserved, "{report:?}");
    assert_eq!(report.in_flight, 0);
    assert!(report.error.is_none(), "{:?}", report.error);
    let egress_sum: u64 = report.egress.iter().map(|e| e.transmitted).sum();
    assert_eq!(egress_sum, report.transmitted, "egress totals add up");
    for e in &report.egress {
        assert_eq!(e.in_flight, 0, "{e:?}");
        assert_eq!(e.received, e.transmitted + e.dropped_total, "{e:?}");
        let flows = report
            .flows
            .iter()
            .filter(|f| f.egress == e.interface)
            .count();
        assert_eq!(flows as u32, e.flows, "{e:?}");
    }
}

#[test]
fn two_egress_links_conserve_every_frame_and_keep_each_flow_in_order() {
    let Some(bond) = Bond::new(2) else {
        return;
    };
    let mut cfg = bond.config(&[200_000_000, 200_000_000]);
    cfg.flows = 16;
    cfg.flow_key = FlowKeyKind::DstPort;
    let bridge = bond.start(cfg);
    let receivers = bond.receivers();
    let mut tx = bond.sender_socket();
    let per_flow = 1500u32;
    // Ports 5008.. so that port p is flow p % 16 = p - 5008.
    let frames = round_robin(5008, 16, per_flow, 100);
    let (report, sent) = send_and_stop(bridge, &mut tx, &frames, 32, Duration::from_micros(300));
    let seen = finish(&bond, receivers);
    check_final(&report);
    let got: u64 = seen.values().map(|(g, _)| g.len() as u64).sum();
    let far_drops: u64 = seen.values().map(|(_, d)| d).sum();
    // Received = transmitted + counted drops; what was transmitted arrived.
    assert_eq!(report.received + report.not_received, sent);
    assert_eq!(
        sent,
        got + report.dropped_total + report.not_received + far_drops,
        "sent = far ends + bridge drops + ring drops ({report:?})"
    );
    for e in &report.egress {
        let (frames, drops) = &seen[&e.interface];
        assert_eq!(e.transmitted, frames.len() as u64 + drops, "{e:?}");
        println!(
            "egress {}: {} flows, {} frames",
            e.interface, e.flows, e.transmitted
        );
    }
    assert!(
        report.egress.iter().all(|e| e.flows > 0),
        "both links carry flows: {:?}",
        report.egress
    );
    // Each flow on its own egress only, its sequence increasing there.
    let mut reorders = 0;
    for (interface, (frames, _)) in &seen {
        let mut last: BTreeMap<u16, u32> = BTreeMap::new();
        for (port, seq) in frames {
            let flow = &report.flows[usize::from(port - 5008)];
            assert_eq!(
                &flow.egress, interface,
                "flow {} arrived on {interface}",
                flow.flow
            );
            if let Some(prev) = last.insert(*port, *seq) {
                if *seq <= prev {
                    reorders += 1;
                }
            }
        }
    }
    assert_eq!(reorders, 0, "no flow was reordered");
    for f in &report.flows {
        assert_eq!(f.received, u64::from(per_flow), "flow {}", f.flow);
    }
}

#[test]
fn flows_spread_over_egress_links_by_their_rates() {
    let Some(bond) = Bond::new(2) else {
        return;
    };
    // Rates 1:3 over 64 flows: the slower link's flow count is
    // Binomial(64, 1/4) for a well-mixed placement, mean 16, sd √12 ≈ 3.46;
    // 3.29 sd (two-sided 0.1%) is the tolerance.
    let (n, p) = (64u32, 0.25);
    let mut cfg = bond.config(&[100_000_000, 300_000_000]);
    cfg.flows = n;
    cfg.flow_key = FlowKeyKind::DstPort;
    let bridge = bond.start(cfg);
    let receivers = bond.receivers();
    let mut tx = bond.sender_socket();
    // Ports 5056.. (a multiple of 64): port p is flow p - 5056.
    let frames: Vec<Vec<u8>> = (0..20u32)
        .flat_map(|seq| (0..n as u16).map(move |f| numbered(5056 + f, seq, 80)))
        .collect();
    let sent = send_all(&mut tx, &frames, 32, Duration::from_micros(300));
    settle(&bridge, sent, Duration::from_secs(10));
    std::thread::sleep(Duration::from_millis(200));
    let report = bridge.stop().expect("stop");
    let seen = finish(&bond, receivers);
    check_final(&report);
    let slow = &report.egress[0];
    assert!((slow.weight_share - 0.25).abs() < 1e-9, "{slow:?}");
    let mean = f64::from(n) * p;
    let tolerance = 3.29 * (f64::from(n) * p * (1.0 - p)).sqrt();
    println!(
        "flows per egress: {:?} (slower link: expected {mean} ± {tolerance:.1})",
        report
            .egress
            .iter()
            .map(|e| (&e.interface, e.flows))
            .collect::<Vec<_>>()
    );
    assert!(
        (f64::from(slow.flows) - mean).abs() <= tolerance,
        "{} flows on the slower link, expected {mean} ± {tolerance:.1}",
        slow.flows
    );
    assert_eq!(report.egress.iter().map(|e| e.flows).sum::<u32>(), n);
    // The far ends saw exactly the flows the report placed on them.
    for e in &report.egress {
        let ports: BTreeSet<u16> = seen[&e.interface].0.iter().map(|(p, _)| *p).collect();
        let placed: BTreeSet<u16> = report
            .flows
            .iter()
            .filter(|f| f.egress == e.interface && f.transmitted > 0)
            .map(|f| 5056 + f.flow as u16)
            .collect();
        assert_eq!(ports, placed, "flows seen on {}", e.interface);
    }
}

#[test]
fn an_unknown_egress_interface_is_a_usage_error() {
    let Some(bond) = Bond::new(1) else {
        return;
    };
    let mut cfg = bond.config(&[10_000_000]);
    cfg.extra_outputs.push(Egress::new("pspat-nosuch0"));
    let err = bond
        .bridge
        .run(|| Bridge::start(cfg))
        .expect("enter the bridge namespace")
        .expect_err("no such interface");
    assert!(err.is_usage(), "{err}");
    assert!(err.to_string().contains("pspat-nosuch0"), "{err}");
}

#[test]
fn duplicate_and_mixed_egress_configurations_are_refused() {
    let mut cfg = BridgeConfig::new("pspat-in", "pspat-o0");
    cfg.extra_outputs.push(Egress::new("pspat-o0"));
    let err = cfg.validate().expect_err("duplicate");
    assert!(err.to_string().contains("given twice"), "{err}");
    let mut cfg = BridgeConfig::new("pspat-in", "pspat-o0");
    cfg.extra_outputs.push(Egress::new("pspat-in"));
    assert!(cfg.validate().is_err(), "the input as an egress");
    let mut cfg = BridgeConfig::new("pspat-in", "pspat-o0");
    let mut e = Egress::new("pspat-o1");
    e.rate_bps = Some(1_000_000);
    cfg.extra_outputs.push(e.clone());
    let err = cfg.validate().expect_err("one rate given, one not");
    assert!(err.to_string().contains("every egress"), "{err}");
    cfg.rate_bps = Some(1_000_000);
    cfg.validate().expect("rates everywhere");
    e.rate_bps = Some(0);
    cfg.extra_outputs = vec![e];
    let err = cfg.validate().expect_err("zero rate");
    assert!(err.to_string().contains("pspat-o1"), "{err}");
    // A caller-built scheduler drives one link.
    let mut cfg = BridgeConfig::new("pspat-in", "pspat-o0");
    cfg.extra_outputs.push(Egress::new("pspat-o1"));
    let sched = pspat_sched::SchedulerConfig::default()
        .build(pspat_sched::FlowTable::uniform(1).unwrap())
        .unwrap();
    let err = Bridge::start_custom(
        cfg,
        sched,
        |_| {},
        |_| pspat_bridge::HashClassifier::new(&BridgeConfig::new("a", "b")),
    )
    .expect_err("two egress, one scheduler");
    assert!(err.is_usage(), "{err}");
}
