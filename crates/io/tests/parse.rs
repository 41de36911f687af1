//! Parsing: round trips with etherparse-built packets, every malformed case
//! counted under its reason, and random bytes never panic.
mod common;

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use etherparse::{PacketBuilder, VlanId};
use proptest::prelude::*;
use pspat_io::parse::{
    parse_frame, FlowKey, FlowKeyKind, IpVersion, ParseLimits, ParseReason, ParseStats,
};

fn vlan(id: u16) -> VlanId {
    VlanId::try_new(id).expect("a 12-bit VLAN ID")
}

#[test]
fn every_malformed_frame_is_counted_under_its_reason() {
    let limits = ParseLimits::default();
    let mut stats = ParseStats::default();
    let cases = common::malformed();
    for (name, frame, reason) in &cases {
        let outcome = stats.parse(frame, &limits);
        assert_eq!(outcome.map_err(|e| e.reason), Err(*reason), "{name}");
    }
    assert_eq!(stats.parsed, 0);
    assert_eq!(stats.refused_total(), cases.len() as u64);
    for reason in ParseReason::ALL {
        let expected = cases.iter().filter(|(_, _, r)| *r == reason).count() as u64;
        assert_eq!(stats.refused(reason), expected, "{reason}");
    }
    let names: Vec<&str> = stats.counters().map(|(name, _)| name).collect();
    let mut unique = names.clone();
    unique.sort_unstable();
    unique.dedup();
    assert_eq!(
        unique.len(),
        ParseReason::ALL.len(),
        "counter names are distinct"
    );
}

#[test]
fn a_short_ipv6_chain_parses_to_its_ports() {
    let key = parse_frame(&common::ipv6_ext_chain(5), &ParseLimits::default()).unwrap();
    assert_eq!((key.protocol, key.src_port, key.dst_port), (17, 12345, 53));
    assert_eq!(key.ip_version, IpVersion::V6);
}

#[test]
fn icmp_keys_carry_type_and_code() {
    let mut frame = Vec::new();
    PacketBuilder::ethernet2(common::SRC_MAC, common::DST_MAC)
        .ipv4([10, 199, 0, 1], [10, 199, 0, 2], 64)
        .icmpv4_echo_request(7, 1)
        .write(&mut frame, b"ping")
        .unwrap();
    let key = parse_frame(&frame, &ParseLimits::default()).unwrap();
    assert_eq!((key.protocol, key.src_port, key.dst_port), (1, 8 << 8, 0));
    frame.clear();
    PacketBuilder::ethernet2(common::SRC_MAC, common::DST_MAC)
        .ipv6([0xfd; 16], [0xfe; 16], 64)
        .icmpv6_echo_request(7, 1)
        .write(&mut frame, b"ping")
        .unwrap();
    let key = parse_frame(&frame, &ParseLimits::default()).unwrap();
    assert_eq!((key.protocol, key.src_port), (58, 128 << 8));
}

#[test]
fn projections_keep_only_the_named_fields() {
    let key = parse_frame(&common::udp4(1000, 2000, b"x"), &ParseLimits::default()).unwrap();
    let other_src = FlowKey {
        src: IpAddr::V4(Ipv4Addr::new(10, 199, 0, 9)),
        src_port: 7,
        ..key
    };
    for (name, kind) in FlowKeyKind::NAMES {
        assert_eq!(name.parse::<FlowKeyKind>(), Ok(kind));
        assert_eq!(kind.to_string(), name);
    }
    assert!("6-tuple".parse::<FlowKeyKind>().is_err());
    assert_ne!(
        key.project(FlowKeyKind::FiveTuple),
        other_src.project(FlowKeyKind::FiveTuple)
    );
    assert_ne!(
        key.project(FlowKeyKind::SrcIp),
        other_src.project(FlowKeyKind::SrcIp)
    );
    assert_eq!(
        key.project(FlowKeyKind::DstIp),
        other_src.project(FlowKeyKind::DstIp)
    );
    assert_eq!(
        key.project(FlowKeyKind::DstPort),
        other_src.project(FlowKeyKind::DstPort)
    );
    assert_eq!(key.project(FlowKeyKind::DstPort).dst_port, 2000);
    assert_eq!(key.project(FlowKeyKind::SrcIp).src, key.src);
    assert_eq!(key.project(FlowKeyKind::SrcIp).dst_port, 0);
}

#[test]
fn the_hash_is_well_mixed() {
    // Keys that differ in one port: each output bit flips for about half
    // of them (an avalanche test over 4096 neighbours).
    let base = parse_frame(&common::udp4(1000, 2000, b"x"), &ParseLimits::default()).unwrap();
    let h0 = base.hash(42);
    let mut flips = [0u32; 64];
    let n = 4096u32;
    for port in 0..n {
        let key = FlowKey {
            dst_port: 2001 + port as u16,
            ..base
        };
        let diff = key.hash(42) ^ h0;
        for (bit, count) in flips.iter_mut().enumerate() {
            *count += (diff >> bit & 1) as u32;
        }
    }
    for (bit, count) in flips.iter().enumerate() {
        let share = f64::from(*count) / f64::from(n);
        assert!((0.44..0.56).contains(&share), "bit {bit} flips {share}");
    }
    assert_ne!(base.hash(1), base.hash(2), "the seed matters");
    assert_eq!(base.hash(42), h0, "deterministic");
}

fn ip4() -> impl Strategy<Value = [u8; 4]> {
    any::<[u8; 4]>()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..1600)) {
        let mut stats = ParseStats::default();
        let _ = stats.parse(&bytes, &ParseLimits::default());
        prop_assert_eq!(stats.parsed + stats.refused_total(), 1);
    }

    #[test]
    fn random_bytes_after_an_ip_ethertype_never_panic(
        ether_type in prop_oneof![Just(0x0800u16), Just(0x86dd), Just(0x8100), Just(0x88a8)],
        bytes in proptest::collection::vec(any::<u8>(), 0..200),
    ) {
        let mut frame = common::udp4(1, 2, b"")[..12].to_vec();
        frame.extend_from_slice(&ether_type.to_be_bytes());
        frame.extend_from_slice(&bytes);
        let _ = parse_frame(&frame, &ParseLimits::default());
    }

    #[test]
    fn ipv4_round_trips(
        src in ip4(), dst in ip4(), sport: u16, dport: u16, tcp: bool,
        tags in 0usize..=2, outer in 0u16..4096, inner in 0u16..4096,
        payload in proptest::collection::vec(any::<u8>(), 0..64),
    ) {
        let eth = PacketBuilder::ethernet2(common::SRC_MAC, common::DST_MAC);
        let mut frame = Vec::new();
        let ip = match tags {
            0 => eth.ipv4(src, dst, 64),
            1 => eth.single_vlan(vlan(outer)).ipv4(src, dst, 64),
            _ => eth.double_vlan(vlan(outer), vlan(inner)).ipv4(src, dst, 64),
        };
        if tcp {
            ip.tcp(sport, dport, 1, 100).write(&mut frame, &payload).unwrap();
        } else {
            ip.udp(sport, dport).write(&mut frame, &payload).unwrap();
        }
        let key = parse_frame(&frame, &ParseLimits::default()).unwrap();
        prop_assert_eq!(key.src, IpAddr::V4(Ipv4Addr::from(src)));
        prop_assert_eq!(key.dst, IpAddr::V4(Ipv4Addr::from(dst)));
        prop_assert_eq!((key.src_port, key.dst_port), (sport, dport));
        prop_assert_eq!(key.protocol, if tcp { 6 } else { 17 });
        prop_assert_eq!(key.ip_version, IpVersion::V4);
        prop_assert_eq!(key.outer_vlan, (tags >= 1).then_some(outer));
        prop_assert_eq!(key.inner_vlan, (tags == 2).then_some(inner));
    }

    #[test]
    fn ipv6_round_trips(
        src: [u8; 16], dst: [u8; 16], sport: u16, dport: u16, tcp: bool,
        payload in proptest::collection::vec(any::<u8>(), 0..64),
    ) {
        let ip = PacketBuilder::ethernet2(common::SRC_MAC, common::DST_MAC).ipv6(src, dst, 64);
        let mut frame = Vec::new();
        if tcp {
            ip.tcp(sport, dport, 1, 100).write(&mut frame, &payload).unwrap();
        } else {
            ip.udp(sport, dport).write(&mut frame, &payload).unwrap();
        }
        let key = parse_frame(&frame, &ParseLimits::default()).unwrap();
        prop_assert_eq!(key.src, IpAddr::V6(Ipv6Addr::from(src)));
        prop_assert_eq!(key.dst, IpAddr::V6(Ipv6Addr::from(dst)));
        prop_assert_eq!((key.src_port, key.dst_port, key.protocol), (sport, dport, if tcp { 6 } else { 17 }));
        prop_assert_eq!(key.ip_version, IpVersion::V6);
    }
}
