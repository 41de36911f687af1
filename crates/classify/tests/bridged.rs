//! Two-pass classification of bridged packets ([`Classifier::classify_bridged`]):
//! a frame crossing from interface A to B is seen `in recv A`, then `out xmit
//! B`; the first pass ending in a pipe, a queue or a drop decides.

use std::net::IpAddr;

use pspat_classify::{Classifier, ClassifierLimits, DropReason, PacketKey, Verdict};
use pspat_sched::Instant;

const A: u32 = 11;
const B: u32 = 12;

fn classifier(text: &str) -> Classifier {
    let plan = pspat_config::parse_ipfw(text, "bridged.ipfw")
        .unwrap()
        .validate(&pspat_config::NoProfiles)
        .unwrap();
    let mut c = Classifier::from_plan(&plan, &ClassifierLimits::default()).unwrap();
    c.bind_interface("pspat-a", A);
    c.bind_interface("pspat-b", B);
    c
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn icmp() -> PacketKey {
    PacketKey::new(ip("10.199.0.1"), ip("10.199.0.2"), 1, 0, 0)
}

fn udp(dport: u16) -> PacketKey {
    PacketKey::new(ip("10.199.0.1"), ip("10.199.0.2"), 17, 4000, dport)
}

/// The link of an enqueue verdict, `None` for pass, `Some(0)` never (no pipe 0).
fn link(v: Verdict) -> Option<u32> {
    match v {
        Verdict::Enqueue(p) => Some(p.link),
        _ => None,
    }
}

fn counters(c: &Classifier) -> Vec<(u32, u64, u64)> {
    c.rule_counters()
        .map(|(n, r)| (n, r.packets, r.bytes))
        .collect()
}

const NOW: Instant = Instant::ZERO;

#[test]
fn in_recv_matches_the_ingress_interface_only() {
    let mut c = classifier(
        "pipe 1 config delay 20ms\npipe 2 config delay 20ms\n\
         add 100 pipe 1 ip from any to any in recv pspat-a\n\
         add 200 pipe 2 ip from any to any in recv pspat-b\n\
         default allow\n",
    );
    assert_eq!(link(c.classify_bridged(NOW, &icmp(), A, B, 100)), Some(1));
    assert_eq!(link(c.classify_bridged(NOW, &icmp(), B, A, 100)), Some(2));
    // One match each: the B -> A packet was tried against rule 100 on its
    // `in` pass and did not match it.
    assert_eq!(counters(&c), vec![(100, 1, 100), (200, 1, 100)]);
    assert_eq!(c.default_counters().packets, 0);
    let s = c.stats();
    assert_eq!((s.packets, s.enqueued, s.passed), (2, 2, 0));
}

#[test]
fn out_xmit_matches_on_the_second_pass_and_counts_the_default_once() {
    let mut c = classifier(
        "pipe 1 config delay 30ms\npipe 2 config delay 10ms\n\
         add 100 pipe 1 ip from any to any out xmit pspat-b\n\
         add 200 pipe 2 ip from any to any in recv pspat-b\n\
         default allow\n",
    );
    // A -> B: `in recv A` matches nothing (default allow, counted), then
    // `out xmit B` matches rule 100.
    assert_eq!(link(c.classify_bridged(NOW, &icmp(), A, B, 64)), Some(1));
    assert_eq!(c.default_counters().packets, 1);
    // B -> A: rule 200 on the first pass; the second pass is not run (the
    // default is not counted again).
    assert_eq!(link(c.classify_bridged(NOW, &icmp(), B, A, 64)), Some(2));
    assert_eq!(c.default_counters().packets, 1);
    assert_eq!(counters(&c), vec![(100, 1, 64), (200, 1, 64)]);
    // The same rules through `classify` (one `in` pass on the key's
    // interface): `xmit` never matches there.
    let mut k = icmp();
    k.ifindex = A;
    assert_eq!(c.classify(NOW, &k, 64), Verdict::Pass);
}

#[test]
fn a_direction_less_rule_decides_on_the_first_pass() {
    let mut c = classifier(
        "pipe 1 config delay 10ms\npipe 2 config delay 10ms\n\
         add 100 pipe 1 icmp from any to any\n\
         add 200 pipe 2 icmp from any to any out\n\
         default allow\n",
    );
    // Both directions hit rule 100 on their `in` pass; rule 200 (`out`)
    // would only see what 100 let through.
    assert_eq!(link(c.classify_bridged(NOW, &icmp(), A, B, 84)), Some(1));
    assert_eq!(link(c.classify_bridged(NOW, &icmp(), B, A, 84)), Some(1));
    assert_eq!(counters(&c), vec![(100, 2, 168), (200, 0, 0)]);
    // UDP matches neither pass: passed, default counted on both passes.
    assert_eq!(c.classify_bridged(NOW, &udp(9), A, B, 50), Verdict::Pass);
    assert_eq!(c.default_counters().packets, 2);
    assert_eq!(c.default_counters().bytes, 100);
    assert_eq!(c.stats().packets, 3);
    assert_eq!(c.stats().passed, 1);
}

#[test]
fn via_matches_the_interface_in_either_pass() {
    let mut c = classifier(
        "pipe 1 config delay 10ms\n\
         add 100 pipe 1 ip from any to any via pspat-b\n\
         default allow\n",
    );
    // A -> B: `via B` on the `out` pass; B -> A: on the `in` pass.
    assert_eq!(link(c.classify_bridged(NOW, &icmp(), A, B, 10)), Some(1));
    assert_eq!(link(c.classify_bridged(NOW, &icmp(), B, A, 10)), Some(1));
    assert_eq!(counters(&c), vec![(100, 2, 20)]);
    assert_eq!(c.default_counters().packets, 1);
    // Neither interface is pspat-b: both passes miss.
    const C: u32 = 13;
    assert_eq!(c.classify_bridged(NOW, &icmp(), A, C, 10), Verdict::Pass);
    assert_eq!(c.default_counters().packets, 3);
}

#[test]
fn an_allow_rule_hands_the_packet_to_the_out_pass() {
    let mut c = classifier(
        "pipe 1 config delay 10ms\npipe 2 config delay 10ms\n\
         add 100 allow udp from any to any dst-port 53 in\n\
         add 200 pipe 1 udp from any to any out xmit pspat-b\n\
         add 300 pipe 2 udp from any to any\n\
         default deny\n",
    );
    // Port 53, A -> B: allowed on the `in` pass (rule 100), then rule 200 on
    // the `out` pass: first match of the second pass.
    assert_eq!(link(c.classify_bridged(NOW, &udp(53), A, B, 70)), Some(1));
    // Port 53, B -> A: allowed in; on the `out` pass on A, rule 200 misses,
    // rule 300 matches.
    assert_eq!(link(c.classify_bridged(NOW, &udp(53), B, A, 70)), Some(2));
    // Port 54: rule 300 on the `in` pass already.
    assert_eq!(link(c.classify_bridged(NOW, &udp(54), A, B, 70)), Some(2));
    assert_eq!(
        counters(&c),
        vec![(100, 2, 140), (200, 1, 70), (300, 2, 140)]
    );
    assert_eq!(c.default_counters().packets, 0);
    assert_eq!(c.stats().packets, 3);
    assert_eq!(c.stats().enqueued, 3);
}

#[test]
fn deny_on_either_pass_drops_and_default_deny_stops_the_first_pass() {
    let mut c = classifier(
        "pipe 1 config delay 10ms\n\
         add 100 allow icmp from any to any in\n\
         add 200 deny icmp from any to any out xmit pspat-a\n\
         add 300 pipe 1 udp from any to any out\n\
         default deny\n",
    );
    // ICMP A -> B: allowed in, no rule out (200 names pspat-a): default deny.
    assert_eq!(
        c.classify_bridged(NOW, &icmp(), A, B, 84),
        Verdict::Drop(DropReason::DefaultDeny)
    );
    // ICMP B -> A: allowed in, rule 200 out.
    assert_eq!(
        c.classify_bridged(NOW, &icmp(), B, A, 84),
        Verdict::Drop(DropReason::RuleDeny)
    );
    // UDP: nothing matches `in`, and the default (deny) ends it there; rule
    // 300 (`out`) is never tried.
    assert_eq!(
        c.classify_bridged(NOW, &udp(9), A, B, 50),
        Verdict::Drop(DropReason::DefaultDeny)
    );
    assert_eq!(counters(&c), vec![(100, 2, 168), (200, 1, 84), (300, 0, 0)]);
    assert_eq!(c.default_counters().packets, 2);
    let s = c.stats();
    assert_eq!(s.packets, 3);
    assert_eq!(s.dropped[DropReason::DefaultDeny.index()], 2);
    assert_eq!(s.dropped[DropReason::RuleDeny.index()], 1);
}

#[test]
fn masked_queues_see_the_same_key_in_both_passes() {
    let mut c = classifier(
        "pipe 1 config bw 1Mbit/s\n\
         queue 10 config pipe 1 mask src-ip 0xffffffff\n\
         add 100 queue 10 ip from any to any out xmit pspat-b\n\
         default allow\n",
    );
    let a = PacketKey::new(ip("10.199.0.1"), ip("10.199.9.9"), 17, 1, 2);
    let b = PacketKey::new(ip("10.199.0.2"), ip("10.199.9.9"), 17, 1, 2);
    let Verdict::Enqueue(pa) = c.classify_bridged(NOW, &a, A, B, 100) else {
        panic!("not enqueued")
    };
    let Verdict::Enqueue(pb) = c.classify_bridged(NOW, &b, A, B, 100) else {
        panic!("not enqueued")
    };
    let Verdict::Enqueue(pa2) = c.classify_bridged(Instant::from_nanos(1_000), &a, A, B, 100)
    else {
        panic!("not enqueued")
    };
    assert!(pa.new_queue && pb.new_queue && !pa2.new_queue);
    assert_ne!(pa.flow, pb.flow);
    assert_eq!(pa.flow, pa2.flow);
    assert_eq!(c.flowset_stats(10).unwrap().live, 2);
}
