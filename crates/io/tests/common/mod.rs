//! Frames for the tests: valid ones built with etherparse, numbered ones,
//! malformed ones built by hand, each with the parse reason it must be
//! counted under; and the two-namespace veth bed of the AF_PACKET tests.
#![allow(dead_code)]

use std::time::{Duration, Instant};

use etherparse::PacketBuilder;
use pspat_io::af_packet::{PacketRx, PacketTx};
use pspat_io::netns::{self, Namespace, VethPair};
use pspat_io::parse::ParseReason;

/// The marker at the start of a numbered frame's payload.
pub const MAGIC: &[u8; 8] = b"pspat-io";

/// Two namespaces joined by a veth pair, or `None` (printing why) where
/// namespaces are unavailable.
pub fn test_bed() -> Option<(Namespace, Namespace, VethPair)> {
    if let Some(reason) = netns::unavailable() {
        println!("skipped: {reason}");
        return None;
    }
    let ns_a = Namespace::create().expect("create namespace a");
    let ns_b = Namespace::create().expect("create namespace b");
    let pair = VethPair::create(&ns_a, &ns_b).expect("create the veth pair");
    Some((ns_a, ns_b, pair))
}

/// A UDP frame carrying the marker and a sequence number, from source port
/// `1000 + flow`, its payload padded to `payload_len` bytes (at least 12).
pub fn numbered(seq: u32, flow: u16, payload_len: usize) -> Vec<u8> {
    let mut payload = MAGIC.to_vec();
    payload.extend_from_slice(&seq.to_be_bytes());
    payload.resize(payload_len.max(12), (seq % 251) as u8);
    udp4(1000 + flow, 2000, &payload)
}

/// The sequence number of a frame [`numbered`] built.
pub fn sequence_of(frame: &[u8]) -> Option<u32> {
    let payload = frame.get(42..)?;
    if !payload.starts_with(MAGIC) {
        return None;
    }
    Some(u32::from_be_bytes(payload.get(8..12)?.try_into().ok()?))
}

pub const SRC_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 1];
pub const DST_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 2];

/// An IPv4/UDP frame from 10.199.0.1:sport to 10.199.0.2:dport.
pub fn udp4(sport: u16, dport: u16, payload: &[u8]) -> Vec<u8> {
    let mut frame = Vec::new();
    PacketBuilder::ethernet2(SRC_MAC, DST_MAC)
        .ipv4([10, 199, 0, 1], [10, 199, 0, 2], 64)
        .udp(sport, dport)
        .write(&mut frame, payload)
        .expect("writing to a Vec cannot fail");
    frame
}

fn ethernet(ether_type: u16) -> Vec<u8> {
    let mut frame = Vec::new();
    frame.extend_from_slice(&DST_MAC);
    frame.extend_from_slice(&SRC_MAC);
    frame.extend_from_slice(&ether_type.to_be_bytes());
    frame
}

fn vlan_tags(count: usize, inner_type: u16) -> Vec<u8> {
    let mut frame = ethernet(0x88a8);
    for tag in 0..count {
        let next = if tag + 1 == count { inner_type } else { 0x8100 };
        frame.extend_from_slice(&(10 + tag as u16).to_be_bytes());
        frame.extend_from_slice(&next.to_be_bytes());
    }
    frame
}

/// An IPv6 frame whose UDP header follows `count` destination-options
/// headers of 8 bytes each.
pub fn ipv6_ext_chain(count: usize) -> Vec<u8> {
    let mut frame = ethernet(0x86dd);
    let payload_len = (count * 8 + 8) as u16;
    frame.extend_from_slice(&[0x60, 0, 0, 0]);
    frame.extend_from_slice(&payload_len.to_be_bytes());
    frame.push(if count == 0 { 17 } else { 60 });
    frame.push(64);
    frame.extend_from_slice(&[0xfd, 0xc7, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
    frame.extend_from_slice(&[0xfd, 0xc7, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2]);
    for header in 0..count {
        let next = if header + 1 == count { 17 } else { 60 };
        // next header, length 0 (8 bytes), PadN option of 4 bytes.
        frame.extend_from_slice(&[next, 0, 1, 4, 0, 0, 0, 0]);
    }
    frame.extend_from_slice(&[0x30, 0x39, 0x00, 0x35, 0, 8, 0, 0]);
    frame
}

/// Malformed or non-IP frames, each with the reason it must be refused
/// for (limits: `ParseLimits::default()`).
pub fn malformed() -> Vec<(&'static str, Vec<u8>, ParseReason)> {
    let valid = udp4(1000, 2000, &[0xab; 18]);
    let mut bad_ihl = valid.clone();
    bad_ihl[14] = 0x43;
    let mut bad_version = valid.clone();
    bad_version[14] = 0x65;
    let mut bad_total_len = valid.clone();
    bad_total_len[16..18].copy_from_slice(&10u16.to_be_bytes());
    let mut truncated_udp = valid[..14 + 20 + 4].to_vec();
    truncated_udp[16..18].copy_from_slice(&24u16.to_be_bytes());
    let mut tcp_offset = Vec::new();
    PacketBuilder::ethernet2(SRC_MAC, DST_MAC)
        .ipv4([10, 199, 0, 1], [10, 199, 0, 2], 64)
        .tcp(1000, 80, 1, 1000)
        .write(&mut tcp_offset, &[])
        .expect("writing to a Vec cannot fail");
    tcp_offset[14 + 20 + 12] = 0x20;
    let mut arp = ethernet(0x0806);
    arp.extend_from_slice(&[0, 1, 8, 0, 6, 4, 0, 1]);
    arp.extend_from_slice(&[0; 20]);
    let mut lldp = ethernet(0x88cc);
    lldp.extend_from_slice(&[0; 46]);
    let mut truncated_vlan = ethernet(0x8100);
    truncated_vlan.extend_from_slice(&[0, 10]);
    let mut four_tags = vlan_tags(4, 0x0800);
    four_tags.extend_from_slice(&valid[14..]);
    let mut three_tags = vlan_tags(3, 0x0800);
    three_tags.extend_from_slice(&valid[14..]);
    let chain = ipv6_ext_chain(12);
    // The payload length agrees with the frame, the second header is cut.
    let mut cut_chain = ipv6_ext_chain(3)[..14 + 40 + 12].to_vec();
    cut_chain[18..20].copy_from_slice(&12u16.to_be_bytes());
    let mut hop_by_hop_late = ipv6_ext_chain(2);
    hop_by_hop_late[14 + 40] = 0; // the first option header names hop-by-hop next
    let oversize = udp4(1000, 2000, &[0x5a; 1600]);
    vec![
        (
            "truncated ethernet",
            valid[..10].to_vec(),
            ParseReason::TruncatedEthernet,
        ),
        ("ARP", arp, ParseReason::NonIp),
        ("LLDP", lldp, ParseReason::NonIp),
        (
            "truncated VLAN tag",
            truncated_vlan,
            ParseReason::TruncatedVlan,
        ),
        ("three VLAN tags", three_tags, ParseReason::TooManyVlanTags),
        ("four VLAN tags", four_tags, ParseReason::TooManyVlanTags),
        (
            "truncated IPv4 header",
            valid[..14 + 12].to_vec(),
            ParseReason::TruncatedIp,
        ),
        (
            "IPv4 cut before its total length",
            valid[..valid.len() - 4].to_vec(),
            ParseReason::TruncatedIp,
        ),
        ("IHL 3", bad_ihl, ParseReason::BadIhl),
        (
            "IP version 6 under EtherType IPv4",
            bad_version,
            ParseReason::BadIpVersion,
        ),
        ("total length 10", bad_total_len, ParseReason::BadIpLength),
        (
            "truncated UDP header",
            truncated_udp,
            ParseReason::TruncatedTransport,
        ),
        (
            "TCP data offset 2",
            tcp_offset,
            ParseReason::BadTcpDataOffset,
        ),
        (
            "twelve IPv6 extension headers",
            chain,
            ParseReason::TooManyExtensionHeaders,
        ),
        (
            "cut IPv6 extension header",
            cut_chain,
            ParseReason::TruncatedExtensionHeader,
        ),
        (
            "hop-by-hop after a destination header",
            hop_by_hop_late,
            ParseReason::BadExtensionHeader,
        ),
        ("frame above the MTU", oversize, ParseReason::OversizeFrame),
    ]
}

/// Sends every frame of `frames` by AF_PACKET, retrying while the kernel
/// has no room (for at most two seconds); asserts that all were taken.
pub fn send_all(tx: &mut PacketTx, frames: &[Vec<u8>]) {
    let views: Vec<&[u8]> = frames.iter().map(Vec::as_slice).collect();
    let mut offset = 0;
    let deadline = Instant::now() + Duration::from_secs(2);
    while offset < views.len() && Instant::now() < deadline {
        offset += tx.send_batch(&views[offset..]).expect("send");
    }
    assert_eq!(offset, views.len(), "every frame was taken");
}

/// Receives numbered frames (copies of the ring's bytes, VLAN tag restored)
/// until `want` arrived or two seconds passed; returns them with the
/// largest count one call gave.
pub fn receive_numbered(rx: &mut PacketRx, want: usize) -> (Vec<Vec<u8>>, usize) {
    let mut got = Vec::new();
    let mut largest = 0;
    let deadline = Instant::now() + Duration::from_secs(2);
    while got.len() < want && Instant::now() < deadline {
        let given = rx
            .recv_with(Duration::from_millis(20), |p| {
                let mut buffer = vec![0u8; p.frame_len()];
                let n = p.copy_into(&mut buffer).expect("fits its own length");
                buffer.truncate(n);
                if sequence_of(&buffer).is_some() {
                    got.push(buffer);
                }
            })
            .expect("receive");
        largest = largest.max(given);
    }
    (got, largest)
}
