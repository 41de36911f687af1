//! Behaviour of the classifier through its public API: rules, tables, masks,
//! caps, expiry and memory.

use std::collections::{HashMap, HashSet};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use proptest::prelude::*;
use pspat_classify::{
    Classifier, ClassifierLimits, DropReason, FlowOwner, OverflowPolicy, PacketDirection,
    PacketKey, Placement, Verdict,
};
use pspat_sched::{FlowId, Instant};

mod bridged;
mod dscp;
mod header;
mod prob;

fn plan(text: &str) -> pspat_config::Plan {
    pspat_config::parse_ipfw(text, "test.ipfw")
        .unwrap()
        .validate(&pspat_config::NoProfiles)
        .unwrap()
}

fn classifier(text: &str, limits: &ClassifierLimits) -> Classifier {
    Classifier::from_plan(&plan(text), limits).unwrap()
}

fn v4(a: u32) -> IpAddr {
    IpAddr::V4(Ipv4Addr::from(a))
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn udp(src: IpAddr, dst: IpAddr, sport: u16, dport: u16) -> PacketKey {
    PacketKey::new(src, dst, 17, sport, dport)
}

/// The flow a UDP packet from port 9 to `dport` is enqueued on, if it is.
fn udp_flow(c: &mut Classifier, src: &str, dst: &str, dport: u16) -> Option<FlowId> {
    match c.classify(t(0), &udp(ip(src), ip(dst), 9, dport), 100) {
        Verdict::Enqueue(p) => Some(p.flow),
        _ => None,
    }
}

fn t(ns: u64) -> Instant {
    Instant::from_nanos(ns)
}

fn placed(v: Verdict) -> Placement {
    match v {
        Verdict::Enqueue(p) => p,
        other => panic!("expected an enqueue, got {other:?}"),
    }
}

const MASKED: &str = "sched 4 config type qfq bw 4Mbit/s\n\
                      queue 1 config weight 10 sched 4 mask src-ip 0xffffff00\n\
                      queue 2 config weight 3 sched 4\n\
                      add 100 queue 2 udp from any to any dst-port 53\n\
                      add 200 queue 1 ip from 10.199.0.0/16 to any\n";

fn limits(cap: u32, idle_ns: u64, overflow: OverflowPolicy) -> ClassifierLimits {
    ClassifierLimits {
        queues_per_flowset: cap,
        instances_per_sched: cap,
        idle_expiry_ns: idle_ns,
        overflow,
        ..ClassifierLimits::default()
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// One dynamic queue per distinct masked key: equal masked keys share a
    /// flow id, different ones never do, and the creation count is the
    /// number of distinct masked keys.
    #[test]
    fn one_queue_per_distinct_masked_key(srcs in proptest::collection::vec(0u32..4096, 1..400)) {
        let mut c = classifier(MASKED, &limits(4096, u64::MAX, OverflowPolicy::Drop));
        let mut by_key: HashMap<u32, FlowId> = HashMap::new();
        let mut flows: HashMap<FlowId, u32> = HashMap::new();
        for (i, s) in srcs.iter().enumerate() {
            // 10.199.x.y: the mask keeps 10.199.x.0.
            let src = v4(0x0ac7_0000 | (s << 4) | (i as u32 & 0xf));
            let p = placed(c.classify(t(i as u64), &udp(src, ip("10.199.255.1"), 1000, 80), 100));
            let masked = u32::from(match src { IpAddr::V4(a) => a, _ => unreachable!() }) & 0xffff_ff00;
            if let Some(f) = by_key.insert(masked, p.flow) {
                prop_assert_eq!(f, p.flow);
            }
            if let Some(k) = flows.insert(p.flow, masked) {
                prop_assert_eq!(k, masked);
            }
        }
        let s = c.flowset_stats(1).unwrap();
        prop_assert_eq!(s.created, by_key.len() as u64);
        prop_assert_eq!(s.live as usize, by_key.len());
        prop_assert_eq!(s.overflowed, 0);
    }

    /// Any key, any length, any time (including time running backwards)
    /// classifies without panicking, and every packet is counted once.
    #[test]
    fn unusual_keys_never_panic(
        packets in proptest::collection::vec(
            (any::<bool>(), any::<u128>(), any::<bool>(), any::<u128>(), any::<u8>(), any::<u16>(), any::<u16>(),
             any::<u32>(), any::<u32>(), any::<bool>(), any::<u32>(), any::<u64>()),
            1..200),
    ) {
        let text = "sched 4 config type qfq bw 4Mbit/s mask dst-ip6 /64 dst-ip 0xff\n\
                    pipe 7 config bw 1Mbit/s mask all\n\
                    queue 1 config sched 4 mask all\n\
                    queue 2 config sched 4 mask src-ip6 /48 proto 0xff flow-id 0xfffff\n\
                    table 1 add 10.199.0.0/16 1\ntable 1 add 2001:db8::/32 2\ntable 1 add 0.0.0.0/0 1\n\
                    add 100 deny tcp from any to any dst-port 0-10 in via pspat-x*\n\
                    add 200 queue tablearg ip from table(1) to any\n\
                    add 300 pipe 7 ip6 from any to me src-port 1-100,200-300\n\
                    add 400 queue 2 icmp from any to any\n\
                    default deny\n";
        let mut c = classifier(text, &limits(8, 1000, OverflowPolicy::Drop));
        c.bind_interface("pspat-x0", 3);
        c.set_local_addrs(&[ip("2001:db8::1"), ip("10.199.0.1")]);
        let n = packets.len() as u64;
        for (s6, s, d6, d, proto, sp, dp, label, ifindex, out, len, now) in packets {
            let src = if s6 { IpAddr::V6(Ipv6Addr::from(s)) } else { v4(s as u32) };
            let dst = if d6 { IpAddr::V6(Ipv6Addr::from(d)) } else { v4(d as u32) };
            let key = PacketKey {
                src, dst, proto, src_port: sp, dst_port: dp, flow_label: label, ifindex,
                direction: if out { PacketDirection::Out } else { PacketDirection::In },
                dscp: (label % 64) as u8,
                ip_len: len as u16,
                tcp_flags: (label >> 6) as u8 & 0x3f,
            };
            if let Verdict::Enqueue(p) = c.classify(t(now), &key, len) {
                let link = c.layout().link(p.link).unwrap();
                prop_assert!(p.instance < link.instances);
                prop_assert!(p.flow.0 < link.flow_count());
            }
        }
        let st = c.stats();
        prop_assert_eq!(st.packets, n);
        prop_assert_eq!(st.enqueued + st.passed + st.dropped.iter().sum::<u64>(), n);
        let by_rules: u64 = c.rule_counters().map(|(_, r)| r.packets).sum::<u64>() + c.default_counters().packets;
        prop_assert_eq!(by_rules, n);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// A batch gives exactly the verdicts, counters and state of classifying
    /// its packets one by one.
    #[test]
    fn a_batch_equals_packets_one_by_one(
        packets in proptest::collection::vec((0u32..64, 0u32..4, 0u16..3, 1u32..1500), 0..100),
        steps in proptest::collection::vec(0u64..400, 1..6),
    ) {
        let text = "sched 4 config type qfq mask dst-ip 0x3\n\
                    queue 1 config sched 4 mask src-ip 0xffffffff\n\
                    queue 2 config sched 4\n\
                    add 100 deny udp from any to any dst-port 2\n\
                    add 200 queue 2 udp from any to any dst-port 1\n\
                    add 300 queue 1 ip from 10.199.0.0/16 to any\n\
                    default deny\n";
        let lim = limits(6, 300, OverflowPolicy::Drop);
        let mut one = classifier(text, &lim);
        let mut many = one.clone();
        let keys: Vec<PacketKey> = packets
            .iter()
            .map(|(s, d, port, _)| udp(v4(0x0ac7_0000 | s), v4(0x0ac7_1000 | d), 9, *port))
            .collect();
        let lens: Vec<u32> = packets.iter().map(|p| p.3).collect();
        let mut now = 0;
        for step in steps {
            now += step;
            let expected: Vec<Verdict> = keys.iter().zip(&lens).map(|(k, l)| one.classify(t(now), k, *l)).collect();
            let mut got = vec![Verdict::Pass; keys.len()];
            prop_assert_eq!(many.classify_batch(t(now), &keys, &lens, &mut got), keys.len());
            prop_assert_eq!(&got, &expected);
        }
        prop_assert_eq!(one.stats(), many.stats());
        prop_assert_eq!(one.flowset_stats(1), many.flowset_stats(1));
        prop_assert_eq!(one.instance_stats(4), many.instance_stats(4));
        prop_assert_eq!(one.rule_counters().collect::<Vec<_>>(), many.rule_counters().collect::<Vec<_>>());
        prop_assert_eq!(one.default_counters(), many.default_counters());
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// Classes whose first rule sends every packet to one flowset without
    /// instances take a shorter path in `classify`; it gives exactly the
    /// verdicts, counters and dynamic state of the general path (which
    /// `classify_batch` takes for every packet), through creation, hits,
    /// a full table, expiry and the classes that still need the general
    /// path (a flowset under a sched mask, a rule with conditions, the
    /// default).
    #[test]
    fn the_direct_path_equals_the_general_one(
        packets in proptest::collection::vec((0u32..48, 0u32..8, 0usize..4, 0u16..3, 1u32..1500, any::<bool>()), 0..100),
        steps in proptest::collection::vec(0u64..400, 1..6),
        shared in any::<bool>(),
    ) {
        let text = "sched 4 config type qfq\n\
                    sched 5 config type qfq mask dst-ip 0x3\n\
                    queue 1 config sched 4 mask src-ip 0xffffffff\n\
                    queue 2 config sched 4 mask dst-ip 0xff proto 0xff\n\
                    queue 3 config sched 5 mask src-ip 0xff\n\
                    add 50 queue 3 icmp from any to any\n\
                    add 100 queue 2 udp from any to any\n\
                    add 150 deny tcp from any to any dst-port 2\n\
                    add 200 queue 1 ip from any to any out\n\
                    default deny\n";
        let overflow = if shared { OverflowPolicy::SharedQueue } else { OverflowPolicy::Drop };
        let lim = limits(6, 300, overflow);
        let mut one = classifier(text, &lim);
        let mut general = one.clone();
        let keys: Vec<PacketKey> = packets
            .iter()
            .map(|&(s, d, proto, port, _, out)| {
                let mut k = PacketKey::new(
                    v4(0x0ac7_0000 | s),
                    v4(0x0ac7_1000 | d),
                    [17, 6, 1, 47][proto],
                    9,
                    port,
                );
                k.direction = if out { PacketDirection::Out } else { PacketDirection::In };
                k
            })
            .collect();
        let lens: Vec<u32> = packets.iter().map(|p| p.4).collect();
        let mut now = 0;
        for step in steps {
            now += step;
            let expected: Vec<Verdict> =
                keys.iter().zip(&lens).map(|(k, l)| one.classify(t(now), k, *l)).collect();
            let mut got = vec![Verdict::Pass; keys.len()];
            prop_assert_eq!(general.classify_batch(t(now), &keys, &lens, &mut got), keys.len());
            prop_assert_eq!(&got, &expected);
        }
        prop_assert_eq!(one.stats(), general.stats());
        for q in 1..=3 {
            prop_assert_eq!(one.flowset_stats(q), general.flowset_stats(q));
        }
        prop_assert_eq!(one.instance_stats(5), general.instance_stats(5));
        prop_assert_eq!(one.rule_counters().collect::<Vec<_>>(), general.rule_counters().collect::<Vec<_>>());
        prop_assert_eq!(one.default_counters(), general.default_counters());
    }
}

#[test]
fn idle_queues_expire_and_their_slots_are_reused() {
    let mut c = classifier(MASKED, &limits(2, 1_000, OverflowPolicy::Drop));
    let dst = ip("10.199.255.1");
    let a = udp(ip("10.199.1.1"), dst, 1, 2);
    let b = udp(ip("10.199.2.1"), dst, 1, 2);
    let x = udp(ip("10.199.3.1"), dst, 1, 2);
    let pa = placed(c.classify(t(0), &a, 100));
    let pb = placed(c.classify(t(100), &b, 100));
    assert!(pa.new_queue && pb.new_queue);
    assert_ne!(pa.flow, pb.flow);
    // A is used again at 900: it stays; the table is full for a third key.
    assert_eq!(
        placed(c.classify(t(900), &a, 100)),
        Placement {
            new_queue: false,
            ..pa
        }
    );
    assert_eq!(
        c.classify(t(1_050), &x, 100),
        Verdict::Drop(DropReason::QueueOverflow)
    );
    // B idle since 100: at 1100 it has been idle 1000 ns and expires; X
    // takes its slot (the same flow id), A keeps its own.
    let px = placed(c.classify(t(1_100), &x, 100));
    assert!(px.new_queue);
    assert_eq!(px.flow, pb.flow);
    assert_eq!(placed(c.classify(t(1_200), &a, 100)).flow, pa.flow);
    // B comes back: a new queue, but no free slot until A or X expires.
    assert_eq!(
        c.classify(t(1_300), &b, 100),
        Verdict::Drop(DropReason::QueueOverflow)
    );
    // The explicit sweep reclaims both once idle.
    assert_eq!(c.expire(t(2_200)), 2);
    let s = c.flowset_stats(1).unwrap();
    assert_eq!((s.created, s.expired, s.overflowed, s.live), (3, 3, 2, 0));
    let pb2 = placed(c.classify(t(2_300), &b, 100));
    assert!(pb2.new_queue);
    assert_eq!(c.stats().dropped[DropReason::QueueOverflow.index()], 2);
}

/// A key whose packets went to the shared overflow queue does not move to
/// a queue of its own while it keeps coming (its next packets would leave
/// before those waiting in the overflow queue): only after it has been
/// away from the overflow queue for the idle time.
#[test]
fn a_key_in_the_overflow_queue_stays_there_until_idle_there() {
    let dst = ip("10.199.255.1");
    let a = udp(ip("10.199.1.1"), dst, 1, 2);
    let b = udp(ip("10.199.2.1"), dst, 1, 2);
    let mut c = classifier(MASKED, &limits(1, 1_000, OverflowPolicy::SharedQueue));
    let (_, range) = c.layout().range_of(FlowOwner::Queue(1)).unwrap();
    let overflow = range.overflow.unwrap();
    let pa = placed(c.classify(t(0), &a, 100));
    assert!(pa.new_queue);
    // A is stale from 1000 on; B keeps coming every 500 ns and stays in
    // the overflow queue, though A's slot is free from then on.
    for at in [100, 600, 1_100, 1_600, 2_100] {
        let p = placed(c.classify(t(at), &b, 100));
        assert_eq!(p.flow, overflow, "B at {at}");
        assert!(!p.new_queue);
    }
    // Away from it for 999 ns: still held; for 1 250 ns (1¼ of the idle
    // time, the longest hold) after that: a queue of its own (A's old
    // slot).
    assert_eq!(placed(c.classify(t(3_099), &b, 100)).flow, overflow);
    let own = placed(c.classify(t(4_349), &b, 100));
    assert!(own.new_queue);
    assert_eq!(own.flow, pa.flow);
    let s = c.flowset_stats(1).unwrap();
    assert_eq!((s.created, s.expired, s.overflowed, s.live), (2, 1, 6, 1));
    // Under the drop policy nothing waits in an overflow queue: B takes
    // A's slot as soon as A is stale.
    let mut c = classifier(MASKED, &limits(1, 1_000, OverflowPolicy::Drop));
    placed(c.classify(t(0), &a, 100));
    assert_eq!(
        c.classify(t(100), &b, 100),
        Verdict::Drop(DropReason::QueueOverflow)
    );
    assert!(placed(c.classify(t(1_100), &b, 100)).new_queue);
}

#[test]
fn the_cap_holds_under_both_overflow_policies() {
    let dst = ip("10.199.255.1");
    for policy in [OverflowPolicy::SharedQueue, OverflowPolicy::Drop] {
        let mut c = classifier(MASKED, &limits(4, u64::MAX, policy));
        let (_, range) = c
            .layout()
            .range_of(FlowOwner::Queue(1))
            .map(|(l, r)| (l, *r))
            .unwrap();
        let mut flows = HashSet::new();
        let mut to_overflow = 0;
        for i in 0..10u32 {
            let k = udp(v4(0x0ac7_0000 | (i << 8)), dst, 1, 2);
            match c.classify(t(u64::from(i)), &k, 100) {
                Verdict::Enqueue(p) if Some(p.flow) == range.overflow => to_overflow += 1,
                Verdict::Enqueue(p) => {
                    assert!(p.flow.0 >= range.first.0 && p.flow.0 < range.first.0 + range.dynamic);
                    flows.insert(p.flow);
                }
                Verdict::Drop(r) => assert_eq!(r, DropReason::QueueOverflow),
                Verdict::Pass => panic!("rule 200 matches"),
            }
        }
        assert_eq!(flows.len(), 4);
        let s = c.flowset_stats(1).unwrap();
        assert_eq!((s.created, s.live, s.overflowed), (4, 4, 6));
        match policy {
            OverflowPolicy::SharedQueue => {
                assert_eq!(to_overflow, 6);
                assert_eq!(range.overflow, Some(FlowId(range.first.0 + 4)));
                assert_eq!(c.stats().enqueued, 10);
            }
            OverflowPolicy::Drop => {
                assert_eq!(range.overflow, None);
                assert_eq!(c.stats().dropped[DropReason::QueueOverflow.index()], 6);
                assert_eq!(c.stats().enqueued, 4);
            }
        }
    }
}

#[test]
fn sched_instances_are_independent_per_sched_mask_key() {
    let text = "sched 5 config type qfq bw 4Mbit/s mask dst-ip 0xffffffff\n\
                queue 2 config weight 1 sched 5 mask src-ip 0xffffffff\n\
                add 100 queue 2 ip from any to any\n";
    let mut c = classifier(text, &limits(3, u64::MAX, OverflowPolicy::SharedQueue));
    let s1 = ip("10.199.0.1");
    let d = |n: u32| v4(0x0ac7_0100 + n);
    let a = placed(c.classify(t(0), &udp(s1, d(1), 1, 2), 64));
    let b = placed(c.classify(t(1), &udp(s1, d(2), 1, 2), 64));
    let a2 = placed(c.classify(t(2), &udp(s1, d(1), 9, 9), 64));
    assert_ne!(a.instance, b.instance, "each destination has its instance");
    assert_ne!(a.flow, b.flow, "the same source has a queue per instance");
    assert_eq!((a2.instance, a2.flow), (a.instance, a.flow));
    let link = c.layout().link(5).unwrap();
    assert_eq!(
        link.instances, 4,
        "three instances plus the overflow instance"
    );
    placed(c.classify(t(3), &udp(s1, d(3), 1, 2), 64));
    let over = placed(c.classify(t(4), &udp(s1, d(4), 1, 2), 64));
    assert_eq!(
        over.instance, 3,
        "the fourth destination goes to the overflow instance"
    );
    let st = c.instance_stats(5).unwrap();
    assert_eq!((st.created, st.live, st.overflowed), (3, 3, 1));
    // Instances expire too.
    let mut c = classifier(text, &limits(2, 50, OverflowPolicy::Drop));
    placed(c.classify(t(0), &udp(s1, d(1), 1, 2), 64));
    placed(c.classify(t(10), &udp(s1, d(2), 1, 2), 64));
    assert_eq!(
        c.classify(t(20), &udp(s1, d(3), 1, 2), 64),
        Verdict::Drop(DropReason::InstanceOverflow)
    );
    let p = placed(c.classify(t(55), &udp(s1, d(3), 1, 2), 64));
    assert_eq!(p.instance, 0, "the first instance expired and was reused");
    assert_eq!(c.instance_stats(5).unwrap().expired, 1);
}

#[test]
fn first_match_in_rule_number_order_with_counters() {
    let text = "pipe 1 config bw 1Mbit/s\npipe 2 config bw 2Mbit/s\n\
                add 200 pipe 2 ip from 10.199.1.0/24 to any\n\
                add 100 pipe 1 ip from 10.199.0.0/16 to any\n\
                add 300 deny ip from any to any\n";
    let mut c = classifier(text, &ClassifierLimits::default());
    let dst = ip("192.0.2.1");
    assert_eq!(
        placed(c.classify(t(0), &udp(ip("10.199.1.5"), dst, 1, 2), 100)).link,
        1
    );
    assert_eq!(
        placed(c.classify(t(0), &udp(ip("10.199.7.5"), dst, 1, 2), 200)).link,
        1
    );
    assert_eq!(
        c.classify(t(0), &udp(ip("10.198.1.5"), dst, 1, 2), 300),
        Verdict::Drop(DropReason::RuleDeny)
    );
    let counters: Vec<(u32, u64, u64)> = c
        .rule_counters()
        .map(|(n, r)| (n, r.packets, r.bytes))
        .collect();
    assert_eq!(counters, vec![(100, 2, 300), (200, 0, 0), (300, 1, 300)]);
    assert_eq!(c.default_counters().packets, 0);
    // `zero 300`: that rule only; `zero 7`: no such rule, nothing changes.
    let counts = |c: &Classifier| -> Vec<(u32, u64, u64)> {
        c.rule_counters()
            .map(|(n, r)| (n, r.packets, r.bytes))
            .collect()
    };
    assert!(c.zero_rule_counters(Some(300)));
    assert_eq!(counts(&c), vec![(100, 2, 300), (200, 0, 0), (300, 0, 0)]);
    assert!(!c.zero_rule_counters(Some(7)));
    assert_eq!(counts(&c), vec![(100, 2, 300), (200, 0, 0), (300, 0, 0)]);
    // They count on from 0; `zero`: every rule and the default action.
    c.classify(t(1), &udp(ip("10.198.1.5"), dst, 1, 2), 40);
    assert_eq!(counts(&c)[2], (300, 1, 40));
    assert!(c.zero_rule_counters(None));
    assert!(counts(&c).iter().all(|&(_, p, b)| (p, b) == (0, 0)));
    assert_eq!(c.default_counters().packets, 0);
}

#[test]
fn prefixes_in_both_families_ports_and_protocols() {
    let text = "pipe 1 config\npipe 2 config\npipe 3 config\npipe 4 config\n\
                add 100 pipe 1 ip6 from 2001:db8:1::/48 to any\n\
                add 200 pipe 2 tcp from any to 10.199.2.0/23 dst-port 80,443,1000-2000\n\
                add 300 pipe 3 icmp from any to any\n\
                add 400 pipe 4 udp from any 5000-5010 to any\n\
                default deny\n";
    let mut c = classifier(text, &ClassifierLimits::default());
    let mut link = |k: PacketKey| match c.classify(t(0), &k, 100) {
        Verdict::Enqueue(p) => Some(p.link),
        _ => None,
    };
    let any6 = ip("2001:db8:ffff::1");
    assert_eq!(link(udp(ip("2001:db8:1:2::3"), any6, 1, 2)), Some(1));
    assert_eq!(link(udp(ip("2001:db8:2::3"), any6, 1, 2)), None);
    assert_eq!(
        link(udp(ip("2001:db8:1::1"), ip("10.199.2.1"), 1, 2)),
        Some(1),
        "families may differ: each address by its own"
    );
    let tcp = |dst: &str, port| PacketKey::new(ip("10.199.0.1"), ip(dst), 6, 1234, port);
    for (port, hit) in [
        (80, true),
        (443, true),
        (999, false),
        (1000, true),
        (1500, true),
        (2000, true),
        (2001, false),
    ] {
        assert_eq!(
            link(tcp("10.199.3.255", port)),
            hit.then_some(2),
            "port {port}"
        );
    }
    assert_eq!(link(tcp("10.199.4.0", 80)), None, "outside the /23");
    assert_eq!(
        link(PacketKey::new(
            ip("10.199.0.1"),
            ip("10.199.2.1"),
            17,
            1234,
            80
        )),
        None,
        "udp is not tcp"
    );
    assert_eq!(
        link(PacketKey::new(ip("10.199.0.1"), ip("10.199.9.9"), 1, 0, 0)),
        Some(3)
    );
    assert_eq!(
        link(PacketKey::new(ip("fd00::1"), ip("fd00::2"), 58, 0, 0)),
        Some(3),
        "icmp covers ICMPv6"
    );
    assert_eq!(
        link(udp(ip("10.199.0.1"), ip("10.199.9.9"), 5010, 1)),
        Some(4)
    );
    assert_eq!(link(udp(ip("10.199.0.1"), ip("10.199.9.9"), 5011, 1)), None);
    assert_eq!(c.stats().dropped[DropReason::DefaultDeny.index()], 6);
}

#[test]
fn tablearg_takes_the_longest_prefix_value() {
    let text = "sched 4 config type drr\n\
                queue 10 config sched 4\nqueue 20 config sched 4\nqueue 30 config sched 4\n\
                table 1 add 10.199.0.0/16 10\ntable 1 add 10.199.1.0/24 20\n\
                table 1 add 2001:db8::/32 30\n\
                add 100 queue tablearg out src-ip table(1)\n";
    let mut c = classifier(text, &ClassifierLimits::default());
    let layout = c.layout().clone();
    let flow_of = |q| layout.range_of(FlowOwner::Queue(q)).unwrap().1.first;
    let mut out = |src: &str| {
        let mut k = udp(ip(src), ip("192.0.2.1"), 1, 2);
        k.direction = PacketDirection::Out;
        c.classify(t(0), &k, 100)
    };
    assert_eq!(placed(out("10.199.1.9")).flow, flow_of(20));
    assert_eq!(placed(out("10.199.2.9")).flow, flow_of(10));
    assert_eq!(placed(out("2001:db8::9")).flow, flow_of(30));
    assert_eq!(
        out("10.200.0.1"),
        Verdict::Pass,
        "not in the table: no match, default allow"
    );
    let mut incoming = udp(ip("10.199.1.9"), ip("192.0.2.1"), 1, 2);
    incoming.direction = PacketDirection::In;
    assert_eq!(
        c.classify(t(0), &incoming, 1),
        Verdict::Pass,
        "the rule is 'out' only"
    );
    assert_eq!(c.stats().passed, 2);
}

#[test]
fn interfaces_and_me_match_once_bound() {
    let text = "pipe 1 config\npipe 2 config\n\
                add 100 pipe 1 ip from any to me recv pspat-in*\n\
                add 200 pipe 2 ip from any to any xmit pspat-out0\n\
                default deny\n";
    let mut c = classifier(text, &ClassifierLimits::default());
    let mut k = udp(ip("10.199.0.2"), ip("10.199.0.1"), 1, 2);
    k.ifindex = 7;
    assert_eq!(
        c.classify(t(0), &k, 1),
        Verdict::Drop(DropReason::DefaultDeny),
        "nothing bound yet"
    );
    assert_eq!(c.bind_interface("pspat-in3", 7), 1);
    assert_eq!(c.bind_interface("pspat-out0", 8), 1);
    assert_eq!(c.bind_interface("eth0", 9), 0);
    assert_eq!(
        c.classify(t(0), &k, 1),
        Verdict::Drop(DropReason::DefaultDeny),
        "'me' has no address yet"
    );
    c.set_local_addrs(&[ip("10.199.0.1")]);
    assert_eq!(placed(c.classify(t(0), &k, 1)).link, 1);
    k.direction = PacketDirection::Out;
    assert_eq!(
        c.classify(t(0), &k, 1),
        Verdict::Drop(DropReason::DefaultDeny),
        "recv is for received packets"
    );
    k.ifindex = 8;
    assert_eq!(placed(c.classify(t(0), &k, 1)).link, 2);
}

#[test]
fn a_flood_of_random_sources_stays_within_the_cap() {
    const CAP: u32 = 1024;
    const PACKETS: usize = 1_000_000;
    for policy in [OverflowPolicy::SharedQueue, OverflowPolicy::Drop] {
        let text = "sched 4 config type qfq\nqueue 1 config sched 4 mask src-ip 0xffffffff\n\
                    add 100 queue 1 ip from any to any\n";
        let mut c = classifier(text, &limits(CAP, 60_000_000_000, policy));
        let before = c.memory_estimate();
        let mut rng = fastrand::Rng::with_seed(7);
        // The first CAP distinct sources get queues; every packet of any
        // other source overflows (nothing expires during the flood).
        let mut admitted = HashSet::new();
        let mut expected_overflow = 0u64;
        let dst = ip("10.199.0.1");
        for i in 0..PACKETS {
            let a = rng.u32(..);
            if admitted.len() < CAP as usize {
                admitted.insert(a);
            }
            if !admitted.contains(&a) {
                expected_overflow += 1;
            }
            // 1 µs apart: the whole flood lasts 1 s, far below the expiry.
            c.classify(t(i as u64 * 1_000), &udp(v4(a), dst, 1, 2), 64);
        }
        let s = c.flowset_stats(1).unwrap();
        assert_eq!(s.live, CAP);
        assert_eq!(s.created, u64::from(CAP));
        assert_eq!(s.expired, 0);
        assert_eq!(s.overflowed, expected_overflow);
        assert!(expected_overflow > PACKETS as u64 - 2 * u64::from(CAP));
        assert_eq!(c.memory_estimate(), before, "no growth");
        let st = c.stats();
        match policy {
            OverflowPolicy::SharedQueue => assert_eq!(st.enqueued, PACKETS as u64),
            OverflowPolicy::Drop => {
                assert_eq!(st.dropped[DropReason::QueueOverflow.index()], s.overflowed);
                assert_eq!(st.enqueued + s.overflowed, PACKETS as u64);
            }
        }
    }
}

#[test]
fn memory_per_dynamic_queue_is_at_most_128_bytes() {
    let text = "sched 4 config type qfq mask src-ip 0xffffffff\n\
                queue 1 config sched 4 mask src-ip 0xffffffff\n\
                queue 2 config sched 4 mask all\n\
                add 100 queue 1 ip from any to any\n";
    for (cap, policy) in [1u32, 2, 3, 100, 1000, 4096, 5000, 65_536, 100_000]
        .into_iter()
        .flat_map(|c| [(c, OverflowPolicy::Drop), (c, OverflowPolicy::SharedQueue)])
    {
        let c = classifier(text, &limits(cap, 1, policy));
        let m = c.memory_estimate();
        assert_eq!(
            m.dynamic_slots,
            3 * cap as usize,
            "two flowsets and the instances"
        );
        let per = m.bytes_per_slot();
        println!(
            "cap {cap}, {policy:?}: {per:.1} B per dynamic queue ({} B slot record)",
            m.slot_bytes
        );
        assert!(per <= 128.0, "cap {cap}: {per} bytes per dynamic queue");
        assert!(m.slot_bytes <= 64, "slot record {} bytes", m.slot_bytes);
    }
}

#[test]
fn a_table_stores_only_the_words_its_mask_keeps() {
    // A slot record is 16 B (LRU links, last use) plus 4 B per word the
    // mask can leave non-zero; the index holds 4 B entries for 2·cap
    // rounded up to a power of two.
    let cases = [
        // Source address and the meta word: 24 B records.
        (
            "queue 1 config sched 4 mask src-ip 0xffffffff
",
            24,
        ),
        // The instance word too, on a link with instances: 28 B.
        (
            "queue 1 config sched 4 mask src-ip 0xffffffff
",
            28,
        ),
        // Everything: both IPv6 addresses, ports, meta, instance: 60 B.
        (
            "queue 1 config sched 4 mask all
",
            60,
        ),
    ];
    for (i, (queue, record)) in cases.into_iter().enumerate() {
        let sched = if i == 0 {
            "sched 4 config type qfq
"
        } else {
            "sched 4 config type qfq mask dst-port 0xffff
"
        };
        let text = format!(
            "{sched}{queue}add 100 queue 1 ip from any to any
"
        );
        for cap in [4096u32, 5000, 65_536] {
            let c = classifier(&text, &limits(cap, 1, OverflowPolicy::Drop));
            let m = c.memory_estimate();
            assert_eq!(m.slot_bytes, record, "{text}");
            let cap = cap as usize;
            let table = |record: usize| cap * record + (2 * cap).next_power_of_two() * 4;
            // The link's instances, when masked (port and meta words: 24 B
            // records), `cap` of them.
            let instances = if i == 0 { 0 } else { table(24) };
            assert_eq!(
                m.dynamic_bytes,
                table(record) + instances,
                "{text} cap {cap}"
            );
            if cap.is_power_of_two() {
                assert_eq!(table(record), cap * (record + 8), "8 B of index per queue");
            }
        }
    }
}

#[test]
fn the_layout_builds_each_links_flow_table() {
    let text = "pipe 1 config bw 1Mbit/s\n\
                sched 4 config type qfq bw 4Mbit/s\n\
                queue 3 config weight 7 lmax 1000 sched 4 mask dst-port 0xffff\n\
                queue 2 config weight 5 pri 2 sched 4\n\
                queue 9 config weight 2 pipe 1\n\
                add 100 pipe 1 udp from any to any dst-port 53\n\
                add 200 queue 9 udp from any to any dst-port 54\n\
                add 300 queue 3 ip from any to any\n";
    let c = classifier(text, &limits(16, 1_000, OverflowPolicy::SharedQueue));
    let l = c.layout();
    assert_eq!(
        l.links.iter().map(|x| x.number).collect::<Vec<_>>(),
        vec![1, 4]
    );
    let pipe = l.link(1).unwrap();
    assert_eq!(pipe.ranges[0].owner, FlowOwner::Pipe(1));
    assert_eq!(pipe.ranges[1].owner, FlowOwner::Queue(9));
    assert_eq!(pipe.flow_count(), 2);
    let sched = l.link(4).unwrap();
    // Queue 2 (unmasked) first, then queue 3: 16 slots + overflow.
    assert_eq!(sched.ranges[0].first, FlowId(0));
    assert_eq!(sched.ranges[1].first, FlowId(1));
    assert_eq!(sched.ranges[1].overflow, Some(FlowId(17)));
    assert_eq!(sched.flow_count(), 18);
    let table = sched.flow_table().unwrap();
    assert_eq!(table.capacity(), 18);
    assert_eq!(table.get(FlowId(0)).unwrap().priority, 2);
    assert_eq!(table.get(FlowId(5)).unwrap().weight, 7);
    assert_eq!(table.get(FlowId(17)).unwrap().lmax, 1000);
    assert_eq!(
        sched.owner_of(FlowId(17)).unwrap().owner,
        FlowOwner::Queue(3)
    );
    let mut c = c;
    for port in 0..40u16 {
        let p = placed(c.classify(t(0), &udp(ip("10.199.0.1"), ip("10.199.0.2"), 1, port), 100));
        let link = c.layout().link(p.link).unwrap().clone();
        let table = link.flow_table().unwrap();
        assert!(table.contains(p.flow));
        let owner = link.owner_of(p.flow).unwrap().owner;
        let expected = match port {
            53 => FlowOwner::Pipe(1),
            54 => FlowOwner::Queue(9),
            _ => FlowOwner::Queue(3),
        };
        assert_eq!(owner, expected, "port {port}");
    }
}

#[test]
fn bad_limits_are_typed_errors() {
    let p = plan(MASKED);
    for l in [
        limits(0, 1, OverflowPolicy::Drop),
        limits(4, 0, OverflowPolicy::Drop),
        limits(pspat_classify::MAX_SLOTS + 1, 1, OverflowPolicy::Drop),
    ] {
        let e = Classifier::from_plan(&p, &l).unwrap_err();
        assert!(e.to_string().contains("out of range"), "{e}");
    }
    // Many big flowsets on one link exceed a flow table.
    let mut text = String::from("sched 1 config\n");
    for q in 1..=3 {
        text.push_str(&format!("queue {q} config sched 1 mask all\n"));
    }
    let e = Classifier::from_plan(
        &plan(&text),
        &limits(pspat_classify::MAX_SLOTS, 1, OverflowPolicy::Drop),
    )
    .unwrap_err();
    assert!(
        matches!(
            e,
            pspat_classify::ClassifyError::TooManyFlows { link: 1, .. }
        ),
        "{e}"
    );
}

#[test]
fn dynamic_queues_and_instances_name_their_flow_ids_and_masked_keys() {
    let text = "pipe 2 config bw 1Mbit/s mask src-ip 0xffffff00\n\
                sched 4 config type qfq mask dst-ip 0xffffffff\n\
                queue 1 config sched 4 mask src-ip 0xffffffff src-port 0xffff\n\
                add 100 pipe 2 udp from any to any dst-port 53\n\
                add 200 queue 1 ip from any to any\n";
    let mut c = classifier(text, &limits(8, 1_000_000_000, OverflowPolicy::Drop));
    assert_eq!(c.dynamic_queues(7), None, "no such flowset");
    assert_eq!(c.dynamic_instances(9), None, "no such link");
    assert_eq!(c.dynamic_queues(1), Some(vec![]));
    // Three sources to one destination, one to another.
    let mut seen = HashMap::new();
    for (i, (src, dst, sport)) in [
        ("10.1.0.1", "10.2.0.1", 1000),
        ("10.1.0.2", "10.2.0.1", 1001),
        ("10.1.0.3", "10.2.0.1", 1002),
        ("10.1.0.1", "10.2.0.9", 1000),
    ]
    .into_iter()
    .enumerate()
    {
        let p = placed(c.classify(t(i as u64), &udp(ip(src), ip(dst), sport, 80), 100));
        seen.insert((p.instance, p.flow), (src, dst, sport));
    }
    let queues = c.dynamic_queues(1).unwrap();
    assert_eq!(queues.len(), 4);
    for (instance, flow, key) in &queues {
        let (src, _, sport) = seen[&(*instance, *flow)];
        assert_eq!(key.src, ip(src));
        assert_eq!(key.src_port, sport);
        // Outside the mask: zero.
        assert_eq!(key.dst, ip("0.0.0.0"));
        assert_eq!((key.dst_port, key.proto), (0, 0));
    }
    let instances = c.dynamic_instances(4).unwrap();
    assert_eq!(instances.len(), 2);
    let dsts: HashSet<IpAddr> = instances.iter().map(|(_, k)| k.dst).collect();
    assert_eq!(dsts, HashSet::from([ip("10.2.0.1"), ip("10.2.0.9")]));
    for (instance, k) in &instances {
        let from_queue = seen
            .iter()
            .filter(|((i, _), _)| i == instance)
            .map(|(_, v)| ip(v.1))
            .collect::<HashSet<_>>();
        assert_eq!(from_queue, HashSet::from([k.dst]));
    }
    // The masked pipe: its instances by /24 of the source, IPv6 decoded too.
    c.classify(t(10), &udp(ip("192.0.2.77"), ip("10.2.0.1"), 5, 53), 100);
    c.classify(
        t(11),
        &udp(ip("2001:db8::1"), ip("2001:db8::2"), 5, 53),
        100,
    );
    let pipe = c.dynamic_instances(2).unwrap();
    let srcs: Vec<IpAddr> = pipe.iter().map(|(_, k)| k.src).collect();
    assert_eq!(srcs, vec![ip("192.0.2.0"), ip("::")], "{pipe:?}");
}

#[test]
fn not_inverts_an_address_test_and_a_negated_table_gives_no_tablearg() {
    let text = "pipe 1 config\npipe 2 config\npipe 3 config\n\
                sched 4 config type drr\nqueue 10 config sched 4\nqueue 20 config sched 4\n\
                table 1 add 10.199.1.0/24 10\ntable 1 add 10.199.2.0/24 20\n\
                add 100 pipe 1 udp from not 10.199.0.0/16 to any dst-port 1\n\
                add 200 pipe 2 udp from any to not table(1) dst-port 2\n\
                add 300 queue tablearg udp from table(1) to not 10.199.9.0/24 dst-port 3\n\
                add 400 pipe 3 ip from not me to any dst-port 4\n\
                default deny\n";
    let mut c = classifier(text, &ClassifierLimits::default());
    let layout = c.layout().clone();
    let pipe = |n| layout.range_of(FlowOwner::Pipe(n)).unwrap().1.first;
    let queue = |n| layout.range_of(FlowOwner::Queue(n)).unwrap().1.first;
    let mut to = |src: &str, dst: &str, dport: u16| udp_flow(&mut c, src, dst, dport);
    // `from not 10.199.0.0/16`: outside the prefix, IPv6 included (as ipfw).
    assert_eq!(to("10.200.0.1", "10.199.0.2", 1), Some(pipe(1)));
    assert_eq!(to("2001:db8::1", "10.199.0.2", 1), Some(pipe(1)));
    assert_eq!(to("10.199.3.1", "10.199.0.2", 1), None, "inside: denied");
    // `to not table(1)`: any destination the table has no prefix for.
    assert_eq!(to("10.199.3.1", "10.199.5.5", 2), Some(pipe(2)));
    assert_eq!(to("10.199.3.1", "10.199.1.5", 2), None);
    // The tablearg comes from the positive table, never the negated test.
    assert_eq!(to("10.199.2.7", "10.199.8.1", 3), Some(queue(20)));
    assert_eq!(to("10.199.1.7", "10.199.8.1", 3), Some(queue(10)));
    assert_eq!(to("10.199.1.7", "10.199.9.1", 3), None);
    // `not me` before any local address is set: every address.
    assert_eq!(to("10.199.3.1", "10.199.0.2", 4), Some(pipe(3)));
    c.set_local_addrs(&[ip("10.199.3.1")]);
    assert_eq!(
        c.classify(t(0), &udp(ip("10.199.3.1"), ip("10.199.0.2"), 9, 4), 100),
        Verdict::Drop(DropReason::DefaultDeny)
    );
}

#[test]
fn a_tablearg_with_only_a_negated_table_is_refused() {
    let text = "pipe 10 config\ntable 1 add 10.199.1.0/24 10\n\
                add 100 pipe tablearg ip from not table(1) to any\n";
    let err = pspat_config::parse_ipfw(text, "t.ipfw")
        .unwrap()
        .validate(&pspat_config::NoProfiles)
        .unwrap_err()
        .to_string();
    assert!(err.contains("a 'not table(N)' gives no value"), "{err}");
}

#[test]
fn an_address_list_matches_v4_and_v6_packets_inside_any_of_its_entries() {
    let text = "pipe 1 config\npipe 2 config\n\
                add 100 pipe 1 udp from 10.0.0.1,10.1.0.0/16,2001:db8::/32 to any dst-port 1\n\
                add 200 pipe 2 udp from any to 192.0.2.0/24,2001:db8:1::/48 dst-port 2\n\
                default deny\n";
    let mut c = classifier(text, &ClassifierLimits::default());
    let layout = c.layout().clone();
    let pipe = |n| layout.range_of(FlowOwner::Pipe(n)).unwrap().1.first;
    let mut to = |src: &str, dst: &str, dport: u16| udp_flow(&mut c, src, dst, dport);
    // Each entry of the source list, whatever its family.
    assert_eq!(to("10.0.0.1", "10.9.9.9", 1), Some(pipe(1)));
    assert_eq!(to("10.1.200.3", "10.9.9.9", 1), Some(pipe(1)));
    assert_eq!(to("2001:db8:ffff::7", "2001:db8::9", 1), Some(pipe(1)));
    // Outside every entry: 10.0.0.2 is next to the single address.
    assert_eq!(to("10.0.0.2", "10.9.9.9", 1), None);
    assert_eq!(to("10.2.0.1", "10.9.9.9", 1), None);
    assert_eq!(to("2001:db9::1", "2001:db8::9", 1), None);
    // A v4 packet never meets a v6 entry (::ffff:10.0.0.1 is not 10.0.0.1).
    assert_eq!(to("::ffff:10.0.0.1", "10.9.9.9", 1), None);
    // The destination list.
    assert_eq!(to("10.9.9.9", "192.0.2.77", 2), Some(pipe(2)));
    assert_eq!(to("2001:db8::5", "2001:db8:1:2::1", 2), Some(pipe(2)));
    assert_eq!(to("2001:db8::5", "2001:db8:2::1", 2), None);
    assert_eq!(to("10.9.9.9", "192.0.3.1", 2), None);
}

#[test]
fn a_negated_address_list_matches_addresses_inside_none_of_its_entries() {
    let text = "pipe 1 config\n\
                add 100 pipe 1 udp from not 10.0.0.0/8,192.168.0.0/16 to any dst-port 1\n\
                default deny\n";
    let mut c = classifier(text, &ClassifierLimits::default());
    let layout = c.layout().clone();
    let pipe = layout.range_of(FlowOwner::Pipe(1)).unwrap().1.first;
    let mut from = |src: &str| match c.classify(t(0), &udp(ip(src), ip("198.51.100.1"), 9, 1), 100)
    {
        Verdict::Enqueue(p) => Some(p.flow),
        _ => None,
    };
    assert_eq!(from("10.3.4.5"), None, "inside the first entry");
    assert_eq!(from("192.168.77.1"), None, "inside the second entry");
    assert_eq!(from("172.16.0.1"), Some(pipe));
    assert_eq!(from("192.169.0.1"), Some(pipe));
    // A list of IPv4 entries holds no IPv6 address: all of them pass.
    assert_eq!(from("2001:db8::1"), Some(pipe));
}

#[test]
fn a_mixed_family_list_negated_refuses_both_families_it_names() {
    let text = "pipe 1 config\n\
                add 100 pipe 1 ip from any to not 10.0.0.0/8,2001:db8::/32\n\
                default deny\n";
    let mut c = classifier(text, &ClassifierLimits::default());
    let layout = c.layout().clone();
    let pipe = layout.range_of(FlowOwner::Pipe(1)).unwrap().1.first;
    let mut to = |src: &str, dst: &str| match c.classify(t(0), &udp(ip(src), ip(dst), 9, 1), 100) {
        Verdict::Enqueue(p) => Some(p.flow),
        _ => None,
    };
    assert_eq!(to("192.0.2.1", "10.0.0.9"), None);
    assert_eq!(to("2001:db8::1", "2001:db8:5::9"), None);
    assert_eq!(to("192.0.2.1", "11.0.0.9"), Some(pipe));
    assert_eq!(to("2001:db8::1", "2001:db9::9"), Some(pipe));
}

#[test]
fn rules_with_address_lists_keep_first_match_order() {
    // 10.0.0.5 is in both lists: rule 100 comes first and wins; a source
    // only in the second list falls through to rule 200, one in neither to
    // the catch-all, and a list rule after the catch-all never matches.
    let text = "pipe 1 config\npipe 2 config\npipe 3 config\npipe 4 config\n\
                add 100 pipe 1 ip from 10.0.0.5,2001:db8::5 to any\n\
                add 200 pipe 2 ip from 10.0.0.0/24,2001:db8::/64 to any\n\
                add 300 pipe 3 ip from any to any\n\
                add 400 pipe 4 ip from 10.0.0.6,10.0.0.7 to any\n";
    let mut c = classifier(text, &ClassifierLimits::default());
    let layout = c.layout().clone();
    let pipe = |n| layout.range_of(FlowOwner::Pipe(n)).unwrap().1.first;
    let mut from =
        |src: &str| placed(c.classify(t(0), &udp(ip(src), ip("192.0.2.1"), 9, 1), 100)).flow;
    assert_eq!(from("10.0.0.5"), pipe(1));
    assert_eq!(from("2001:db8::5"), pipe(1));
    assert_eq!(from("10.0.0.6"), pipe(2));
    assert_eq!(from("2001:db8::6"), pipe(2));
    assert_eq!(from("10.0.1.6"), pipe(3));
    assert_eq!(from("2001:db8:1::6"), pipe(3));
    let counts: Vec<(u32, u64)> = c.rule_counters().map(|(n, k)| (n, k.packets)).collect();
    assert_eq!(counts, [(100, 2), (200, 2), (300, 2), (400, 0)]);
}

/// The pipe (link) number a verdict sends to (`None`: no pipe).
fn pipe_of(c: &Classifier, v: Verdict) -> Option<u32> {
    let Verdict::Enqueue(p) = v else { return None };
    let (link, _) = c.layout().range_of(FlowOwner::Pipe(p.link))?;
    Some(link)
}

#[test]
fn a_negated_port_list_matches_ports_outside_it_and_packets_without_ports() {
    let text = "pipe 1 config\npipe 2 config\n\
                add 100 pipe 1 ip from 10.0.0.1 to any not dst-port 80,443,8000-8999\n\
                add 200 pipe 2 ip from 10.0.0.2 not 0-1023 to any\n\
                default deny\n";
    let mut c = classifier(text, &ClassifierLimits::default());
    let mut to = |src: &str, proto: u8, sport: u16, dport: u16| {
        let v = c.classify(
            t(0),
            &PacketKey::new(ip(src), ip("10.9.9.9"), proto, sport, dport),
            100,
        );
        pipe_of(&c, v)
    };
    // TCP and UDP: a port in none of the ranges.
    assert_eq!(to("10.0.0.1", 6, 9, 22), Some(1));
    assert_eq!(to("10.0.0.1", 17, 9, 53), Some(1));
    assert_eq!(to("10.0.0.1", 6, 9, 80), None);
    assert_eq!(to("10.0.0.1", 17, 9, 443), None);
    assert_eq!(to("10.0.0.1", 6, 9, 8500), None);
    assert_eq!(to("10.0.0.1", 6, 9, 9000), Some(1));
    // Without ports (ICMP, ICMPv6, any other protocol): the port test
    // fails before `not` inverts it, as ipfw, whatever the key holds
    // (ICMP's type and code, here 80 in the destination port).
    assert_eq!(to("10.0.0.1", 1, 0x0800, 80), Some(1));
    assert_eq!(to("10.0.0.1", 47, 0, 443), Some(1));
    // `from ADDR not PORTS`: the source port, the same way.
    assert_eq!(to("10.0.0.2", 6, 1023, 80), None);
    assert_eq!(to("10.0.0.2", 6, 1024, 80), Some(2));
    assert_eq!(to("10.0.0.2", 1, 0x0800, 0), Some(2), "ICMP has no ports");
    let mut k = PacketKey::new(ip("2001:db8::2"), ip("2001:db8::9"), 58, 0x8000, 0);
    assert_eq!(
        c.classify(t(0), &k, 100),
        Verdict::Drop(DropReason::DefaultDeny)
    );
    k.src = ip("10.0.0.2");
    let v = c.classify(t(0), &k, 100);
    assert_eq!(
        pipe_of(&c, v),
        Some(2),
        "ICMPv6's number on an IPv4 key has no ports either"
    );
}

#[test]
fn a_port_option_never_matches_a_packet_without_ports() {
    // The parser reports an ICMP message's type and code in the source
    // port (8 << 8 for an echo request: 2048); ipfw's port test needs TCP
    // or UDP, so neither port option sees them.
    let text = "pipe 1 config\npipe 2 config\npipe 3 config\n\
                add 100 pipe 1 ip from any 2048 to any\n\
                add 200 pipe 2 ip from any to any dst-port 0\n\
                add 300 pipe 3 ip from any to any\n";
    let mut c = classifier(text, &ClassifierLimits::default());
    let mut to = |proto: u8, sport: u16, dport: u16| {
        let v = c.classify(
            t(0),
            &PacketKey::new(ip("10.0.0.1"), ip("10.9.9.9"), proto, sport, dport),
            100,
        );
        pipe_of(&c, v)
    };
    assert_eq!(to(1, 0x0800, 0), Some(3), "ICMP echo request");
    assert_eq!(to(58, 0x8000, 0), Some(3), "ICMPv6's number");
    assert_eq!(to(47, 2048, 0), Some(3), "GRE");
    assert_eq!(to(6, 2048, 80), Some(1));
    assert_eq!(to(17, 53, 0), Some(2));
}

#[test]
fn a_negated_protocol_matches_every_other_protocol_and_family() {
    let text = "pipe 1 config\npipe 2 config\npipe 3 config\n\
                add 100 pipe 1 not udp from any to any dst-port 1\n\
                add 200 pipe 2 not icmp from any to any\n\
                add 300 pipe 3 not ip4 from any to any\n\
                default deny\n";
    let mut c = classifier(text, &ClassifierLimits::default());
    let mut of = |src: &str, proto: u8, dport: u16| {
        let v = c.classify(
            t(0),
            &PacketKey::new(ip(src), ip("10.9.9.9"), proto, 9, dport),
            100,
        );
        pipe_of(&c, v)
    };
    assert_eq!(of("10.0.0.1", 6, 1), Some(1), "TCP is not UDP");
    assert_eq!(of("10.0.0.1", 17, 1), Some(2), "UDP falls to `not icmp`");
    assert_eq!(
        of("10.0.0.1", 1, 0),
        None,
        "ICMP: neither rule, an IPv4 source"
    );
    assert_eq!(of("2001:db8::1", 58, 0), Some(3), "ICMPv6: only `not ip4`");
    assert_eq!(
        of("2001:db8::1", 1, 0),
        Some(2),
        "protocol 1 on IPv6 is not pspat's icmp"
    );
    assert_eq!(of("2001:db8::1", 17, 1), Some(2));
}

#[test]
fn a_negated_interface_matches_in_both_directions_as_ipfw() {
    let text = "pipe 1 config\npipe 2 config\npipe 3 config\n\
                add 100 pipe 1 udp from any to any dst-port 1 not via eth0\n\
                add 200 pipe 2 udp from any to any dst-port 2 not recv eth0\n\
                add 300 pipe 3 udp from any to any dst-port 3 not xmit eth*\n\
                default deny\n";
    let mut c = classifier(text, &ClassifierLimits::default());
    let on = |c: &mut Classifier, dport: u16, dir: PacketDirection, ifindex: u32| {
        let mut k = udp(ip("10.0.0.1"), ip("10.0.0.2"), 9, dport);
        k.direction = dir;
        k.ifindex = ifindex;
        let v = c.classify(t(0), &k, 100);
        pipe_of(c, v)
    };
    use PacketDirection::{In, Out};
    // Unbound names: the positive test matches nothing, so `not` matches
    // every packet.
    for dir in [In, Out] {
        assert_eq!(on(&mut c, 1, dir, 1), Some(1));
        assert_eq!(on(&mut c, 2, dir, 1), Some(2));
        assert_eq!(on(&mut c, 3, dir, 1), Some(3));
    }
    assert_eq!(c.bind_interface("eth0", 1), 3, "eth0 fits eth* too");
    assert_eq!(c.bind_interface("eth1", 2), 1);
    // `not via eth0`: any packet not on eth0, in either direction.
    assert_eq!(on(&mut c, 1, In, 1), None);
    assert_eq!(on(&mut c, 1, Out, 1), None);
    assert_eq!(on(&mut c, 1, In, 2), Some(1));
    assert_eq!(on(&mut c, 1, Out, 2), Some(1));
    // `not recv eth0`: every sent packet, eth0's included; a received one
    // unless it came in on eth0.
    assert_eq!(on(&mut c, 2, In, 1), None);
    assert_eq!(on(&mut c, 2, In, 2), Some(2));
    assert_eq!(on(&mut c, 2, Out, 1), Some(2));
    // `not xmit eth*`: every received packet; a sent one unless on eth*.
    assert_eq!(on(&mut c, 3, In, 1), Some(3));
    assert_eq!(on(&mut c, 3, In, 2), Some(3));
    assert_eq!(on(&mut c, 3, Out, 2), None);
    assert_eq!(on(&mut c, 3, Out, 1), None);
    assert_eq!(
        on(&mut c, 3, Out, 3),
        Some(3),
        "an interface eth* was not bound to"
    );
    // Bridged: the `in` pass on the ingress decides here (default deny).
    let k = udp(ip("10.0.0.1"), ip("10.0.0.2"), 9, 2);
    let v = c.classify_bridged(t(0), &k, 2, 1, 100);
    assert_eq!(pipe_of(&c, v), Some(2), "received on eth1");
    assert_eq!(
        c.classify_bridged(t(0), &k, 1, 2, 100),
        Verdict::Drop(DropReason::DefaultDeny),
        "received on eth0: no rule, and the default denies in the first pass"
    );
}

#[test]
fn negated_rules_keep_first_match_order_and_counters() {
    // Each `not` rule is tried in its place: a packet it refuses falls to
    // the next rule, one it takes never reaches the later ones.
    let text = "pipe 1 config\npipe 2 config\npipe 3 config\npipe 4 config\n\
                add 100 pipe 1 tcp from any to any not dst-port 1-1023\n\
                add 200 pipe 2 not tcp from any to any not via eth0\n\
                add 300 pipe 3 ip from any to any\n\
                add 400 pipe 4 udp from any to any not dst-port 53\n";
    let mut c = classifier(text, &ClassifierLimits::default());
    c.bind_interface("eth0", 1);
    let mut of = |proto: u8, dport: u16, ifindex: u32| {
        let mut k = PacketKey::new(ip("10.0.0.1"), ip("10.0.0.2"), proto, 9, dport);
        k.ifindex = ifindex;
        let v = c.classify(t(0), &k, 100);
        pipe_of(&c, v)
    };
    assert_eq!(of(6, 8080, 1), Some(1));
    assert_eq!(of(6, 80, 2), Some(3), "TCP is refused by rule 200");
    assert_eq!(of(17, 80, 2), Some(2));
    assert_eq!(of(17, 80, 1), Some(3), "on eth0");
    assert_eq!(of(1, 0, 1), Some(3));
    let counts: Vec<(u32, u64)> = c.rule_counters().map(|(n, k)| (n, k.packets)).collect();
    assert_eq!(counts, [(100, 1), (200, 1), (300, 3), (400, 0)]);
}
