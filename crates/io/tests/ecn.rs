//! ECN: `ecn_capable` and `mark_ce` on IPv4 (with and without options),
//! IPv6, VLAN-tagged and non-IP frames; the IPv4 header checksum after a
//! mark equals a full recomputation (checked against etherparse's too) on
//! fixed and on random headers; and random bytes are marked exactly when
//! they are ECN-capable, and left alone otherwise.
mod common;

use etherparse::{Ipv4HeaderSlice, PacketBuilder};
use proptest::prelude::*;
use pspat_io::parse::{ecn_capable, ecn_capable_parsed, mark_ce, parse_frame, ParseLimits};

/// The ECN codepoints (RFC 3168 §5).
const NOT_ECT: u8 = 0;
const ECT1: u8 = 1;
const ECT0: u8 = 2;
const CE: u8 = 3;

/// The one's complement sum of `bytes` as big-endian 16-bit words (an odd
/// last byte padded with zero), folded to 16 bits.
fn ones_complement_sum(bytes: &[u8]) -> u16 {
    let mut sum: u32 = bytes
        .chunks(2)
        .map(|w| u32::from(u16::from_be_bytes([w[0], w.get(1).copied().unwrap_or(0)])))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    sum as u16
}

/// The IPv4 header checksum of `header` computed from scratch (RFC 791:
/// the complement of the one's complement sum, the checksum field taken
/// as zero).
fn full_checksum(header: &[u8]) -> u16 {
    let mut h = header.to_vec();
    h[10] = 0;
    h[11] = 0;
    !ones_complement_sum(&h)
}

/// An Ethernet header with the VLAN tags `tpids` (TCI 42 each), then
/// EtherType `ether_type`.
fn l2(tpids: &[u16], ether_type: u16) -> Vec<u8> {
    let mut f = Vec::new();
    f.extend_from_slice(&common::DST_MAC);
    f.extend_from_slice(&common::SRC_MAC);
    for t in tpids {
        f.extend_from_slice(&t.to_be_bytes());
        f.extend_from_slice(&[0x00, 0x2a]);
    }
    f.extend_from_slice(&ether_type.to_be_bytes());
    f
}

/// An IPv4/UDP frame with TOS `tos`, the IPv4 options `options` (a
/// multiple of 4 bytes, at most 40) and the VLAN tags `tpids`, its header
/// checksum right; and where its IP header starts.
fn ipv4_frame(tos: u8, options: &[u8], tpids: &[u16]) -> (Vec<u8>, usize) {
    assert!(options.len().is_multiple_of(4) && options.len() <= 40);
    let ihl = 5 + options.len() / 4;
    let payload = [0x13, 0x88, 0x07, 0xd0, 0x00, 0x0c, 0x00, 0x00, 1, 2, 3, 4];
    let mut ip = vec![
        0x40 | ihl as u8,
        tos,
        0,
        0, // total length, below
        0x12,
        0x34,
        0x40,
        0x00, // identification, don't fragment
        64,
        17,
        0,
        0, // TTL, UDP, checksum
        10,
        199,
        0,
        1,
        10,
        199,
        0,
        2,
    ];
    ip.extend_from_slice(options);
    let total = (ip.len() + payload.len()) as u16;
    ip[2..4].copy_from_slice(&total.to_be_bytes());
    let checksum = full_checksum(&ip);
    ip[10..12].copy_from_slice(&checksum.to_be_bytes());
    let mut f = l2(tpids, 0x0800);
    let at = f.len();
    f.extend_from_slice(&ip);
    f.extend_from_slice(&payload);
    (f, at)
}

/// An IPv6/UDP frame with traffic class `class` and flow label 0xabcde.
fn ipv6_frame(class: u8, tpids: &[u16]) -> (Vec<u8>, usize) {
    let mut f = l2(tpids, 0x86dd);
    let at = f.len();
    let word: u32 = 6 << 28 | u32::from(class) << 20 | 0xabcde;
    f.extend_from_slice(&word.to_be_bytes());
    f.extend_from_slice(&[0, 12, 17, 64]); // payload length, UDP, hop limit
    f.extend_from_slice(&[0xfd; 16]);
    f.extend_from_slice(&[0xfe; 16]);
    f.extend_from_slice(&[0x13, 0x88, 0x07, 0xd0, 0x00, 0x0c, 0x00, 0x00, 1, 2, 3, 4]);
    (f, at)
}

/// The IPv6 traffic class of the header at `at`.
fn traffic_class(frame: &[u8], at: usize) -> u8 {
    (frame[at] & 0x0f) << 4 | frame[at + 1] >> 4
}

/// Checks the IPv4 header at `at` of `frame` after a mark: ECN CE, the
/// DSCP of `tos` kept, the checksum a full recomputation's (etherparse's
/// too) and the header verifying (its words sum to 0xffff).
fn check_marked_v4(frame: &[u8], at: usize, tos: u8) {
    let ihl = usize::from(frame[at] & 0x0f) * 4;
    let header = &frame[at..at + ihl];
    assert_eq!(header[1], tos | CE, "DSCP kept, ECN CE");
    let checksum = u16::from_be_bytes([header[10], header[11]]);
    assert_eq!(checksum, full_checksum(header), "tos {tos:#04x}");
    let theirs = Ipv4HeaderSlice::from_slice(header)
        .expect("a whole header")
        .to_header()
        .calc_header_checksum();
    assert_eq!(checksum, theirs, "etherparse's recomputation");
    assert_eq!(ones_complement_sum(header), 0xffff, "the header verifies");
}

#[test]
fn ipv4_each_codepoint_is_read_and_marked_as_rfc_3168_says() {
    let dscp = 0b1011_1000; // EF
    for (ecn, capable) in [(NOT_ECT, false), (ECT1, true), (ECT0, true), (CE, true)] {
        let tos = dscp | ecn;
        let (original, at) = ipv4_frame(tos, &[], &[]);
        assert_eq!(ecn_capable(&original), capable, "ECN {ecn}");
        let mut frame = original.clone();
        assert_eq!(mark_ce(&mut frame), capable, "ECN {ecn}");
        match ecn {
            NOT_ECT => assert_eq!(frame, original, "a Not-ECT packet is left alone"),
            CE => assert_eq!(frame, original, "already CE: nothing to change"),
            _ => {
                check_marked_v4(&frame, at, dscp);
                // Only the TOS byte and the checksum changed.
                for (i, (a, b)) in original.iter().zip(&frame).enumerate() {
                    if ![at + 1, at + 10, at + 11].contains(&i) {
                        assert_eq!(a, b, "byte {i}");
                    }
                }
                assert!(ecn_capable(&frame));
                // Marking again changes nothing.
                let marked = frame.clone();
                assert!(mark_ce(&mut frame));
                assert_eq!(frame, marked);
            }
        }
    }
}

#[test]
fn ipv4_with_options_is_marked_and_its_longer_header_checksummed() {
    // Router alert (RFC 2113) and a record route with room for 2 hops:
    // IHL 5 + 1 + 3 = 9 words.
    let options = [
        0x94, 0x04, 0x00, 0x00, 0x07, 0x0b, 0x04, 0, 0, 0, 0, 0, 0, 0, 0, 0x01,
    ];
    for ecn in [ECT0, ECT1] {
        let (mut frame, at) = ipv4_frame(0x20 | ecn, &options, &[]);
        assert_eq!(frame[at] & 0x0f, 9);
        assert!(ecn_capable(&frame));
        assert!(mark_ce(&mut frame));
        check_marked_v4(&frame, at, 0x20);
        // The options are untouched.
        assert_eq!(frame[at + 20..at + 36], options);
    }
    // Cut inside the options: the header is not whole, nothing is marked.
    let (frame, at) = ipv4_frame(ECT0, &options, &[]);
    let mut cut = frame[..at + 30].to_vec();
    assert!(!ecn_capable(&cut));
    assert!(!mark_ce(&mut cut));
    assert_eq!(cut, frame[..at + 30]);
}

#[test]
fn ipv6_ecn_bits_straddle_the_first_two_bytes() {
    let dscp = 0b1010_1000; // AF41
    for (ecn, capable) in [(NOT_ECT, false), (ECT1, true), (ECT0, true), (CE, true)] {
        let (original, at) = ipv6_frame(dscp | ecn, &[]);
        assert_eq!(traffic_class(&original, at), dscp | ecn);
        assert_eq!(ecn_capable(&original), capable, "ECN {ecn}");
        let mut frame = original.clone();
        assert_eq!(mark_ce(&mut frame), capable, "ECN {ecn}");
        if ecn == NOT_ECT {
            assert_eq!(frame, original);
            continue;
        }
        assert_eq!(traffic_class(&frame, at), dscp | CE, "DSCP kept, ECN CE");
        // Version, flow label and everything else unchanged: only byte 1
        // of the header, and only its bits 5-4.
        for (i, (a, b)) in original.iter().zip(&frame).enumerate() {
            if i == at + 1 {
                assert_eq!(a & 0xcf, b & 0xcf);
            } else {
                assert_eq!(a, b, "byte {i}");
            }
        }
        assert_eq!(frame[at] >> 4, 6);
        assert!(ecn_capable(&frame));
    }
}

#[test]
fn vlan_tagged_frames_are_marked_after_their_tags() {
    for tpids in [&[0x8100][..], &[0x88a8, 0x8100], &[0x9100, 0x8100]] {
        let (mut frame, at) = ipv4_frame(ECT0, &[], tpids);
        assert_eq!(at, 14 + 4 * tpids.len());
        assert!(ecn_capable(&frame), "{tpids:x?}");
        assert!(mark_ce(&mut frame), "{tpids:x?}");
        check_marked_v4(&frame, at, 0);
        // The tags are untouched.
        assert_eq!(frame[..at], l2(tpids, 0x0800)[..]);
        let (mut frame, at) = ipv6_frame(ECT1, tpids);
        assert!(mark_ce(&mut frame), "{tpids:x?}");
        assert_eq!(traffic_class(&frame, at), CE);
    }
    // Three tags: more than the parser takes, so not recognised.
    let (original, _) = ipv4_frame(ECT0, &[], &[0x88a8, 0x8100, 0x8100]);
    let mut frame = original.clone();
    assert!(!ecn_capable(&frame));
    assert!(!mark_ce(&mut frame));
    assert_eq!(frame, original);
}

#[test]
fn arp_non_ip_and_cut_frames_are_neither_capable_nor_marked() {
    // ARP request: its third byte would be an IPv4 TOS of 0x03 if read as
    // one.
    let mut arp = l2(&[], 0x0806);
    arp.extend_from_slice(&[0, 1, 0x08, 0x00, 6, 4, 0, 1]);
    arp.extend_from_slice(&[0x02, 0, 0, 0, 0, 1, 10, 199, 0, 1]);
    arp.extend_from_slice(&[0; 6]);
    arp.extend_from_slice(&[10, 199, 0, 2]);
    // An IPv4 EtherType over an IPv6 header, an IPv6 one over IPv4.
    let (v6, _) = ipv6_frame(ECT0, &[]);
    let mut v6_as_v4 = v6.clone();
    v6_as_v4[12..14].copy_from_slice(&[0x08, 0x00]);
    let (v4, _) = ipv4_frame(ECT0, &[], &[]);
    let mut v4_as_v6 = v4.clone();
    v4_as_v6[12..14].copy_from_slice(&[0x86, 0xdd]);
    // IHL below 5.
    let mut bad_ihl = v4.clone();
    bad_ihl[14] = 0x44;
    let mut cases = vec![
        ("arp", arp),
        ("lldp", {
            let mut f = l2(&[], 0x88cc);
            f.extend_from_slice(&[0x03; 40]);
            f
        }),
        ("v6 header under an IPv4 EtherType", v6_as_v4),
        ("bad ihl", bad_ihl),
        ("empty", Vec::new()),
        ("cut in the Ethernet header", v4[..10].to_vec()),
        ("Ethernet header only", v4[..14].to_vec()),
        ("cut after the TOS byte", v4[..16].to_vec()),
        ("cut in the IPv4 header", v4[..33].to_vec()),
        ("cut in the IPv6 header", v6[..14 + 39].to_vec()),
        (
            "cut in the VLAN tag",
            ipv4_frame(ECT0, &[], &[0x8100]).0[..16].to_vec(),
        ),
    ];
    // An IPv4 header behind an IPv6 EtherType: IPv4's version fails
    // IPv6's check.
    cases.push(("v4 header under an IPv6 EtherType", v4_as_v6));
    for (name, original) in cases {
        assert!(!ecn_capable(&original), "{name}");
        let mut frame = original.clone();
        assert!(!mark_ce(&mut frame), "{name}");
        assert_eq!(frame, original, "{name}: left alone");
    }
    // A cut payload does not matter: the IP header is whole.
    let mut frame = v4[..34].to_vec();
    assert!(ecn_capable(&frame));
    assert!(mark_ce(&mut frame));
    check_marked_v4(&frame, 14, 0);
}

#[test]
fn a_parsed_frame_reads_its_ecn_at_the_keys_offset_and_keeps_its_key() {
    let limits = ParseLimits::default();
    let mut frames = Vec::new();
    for ecn in [NOT_ECT, ECT1, ECT0, CE] {
        for tpids in [&[][..], &[0x8100], &[0x88a8, 0x8100]] {
            frames.push(ipv4_frame(0x48 | ecn, &[], tpids).0);
            frames.push(ipv4_frame(ecn, &[0x01; 8], tpids).0);
            frames.push(ipv6_frame(0x48 | ecn, tpids).0);
        }
    }
    // And etherparse's own: TCP over IPv6, traffic class ECT(0).
    let mut built = Vec::new();
    PacketBuilder::ethernet2(common::SRC_MAC, common::DST_MAC)
        .ipv6([0xfd; 16], [0xfe; 16], 64)
        .tcp(1, 2, 3, 4)
        .write(&mut built, b"data")
        .expect("written");
    built[15] |= ECT0 << 4;
    frames.push(built);
    for frame in frames {
        let key = parse_frame(&frame, &limits).expect("parses");
        assert_eq!(ecn_capable_parsed(&frame, &key), ecn_capable(&frame));
        let mut marked = frame.clone();
        assert_eq!(mark_ce(&mut marked), ecn_capable(&frame));
        assert_eq!(parse_frame(&marked, &limits), Ok(key), "the flow is kept");
        assert_eq!(ecn_capable_parsed(&marked, &key), ecn_capable(&frame));
    }
}

/// The bytes of IPv4 options: `words` words.
fn options(max_words: usize) -> impl Strategy<Value = Vec<u8>> {
    (0..=max_words).prop_flat_map(|w| proptest::collection::vec(any::<u8>(), w * 4))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4096))]

    /// Random IPv4 headers (any DSCP, an ECN-capable codepoint, any
    /// length, identification, flags, TTL, protocol, addresses and
    /// options; a right checksum): the incremental update equals a full
    /// recomputation, and the header verifies.
    #[test]
    fn the_incremental_checksum_equals_a_full_recomputation(
        dscp in 0u8..64,
        ecn in 1u8..=3,
        total_len in any::<u16>(),
        id in any::<u16>(),
        frag in any::<u16>(),
        ttl in any::<u8>(),
        protocol in any::<u8>(),
        src in any::<[u8; 4]>(),
        dst in any::<[u8; 4]>(),
        opts in options(10),
        tagged in any::<bool>(),
    ) {
        let ihl = 5 + opts.len() / 4;
        let mut ip = vec![0x40 | ihl as u8, dscp << 2 | ecn];
        ip.extend_from_slice(&total_len.to_be_bytes());
        ip.extend_from_slice(&id.to_be_bytes());
        ip.extend_from_slice(&frag.to_be_bytes());
        ip.extend_from_slice(&[ttl, protocol, 0, 0]);
        ip.extend_from_slice(&src);
        ip.extend_from_slice(&dst);
        ip.extend_from_slice(&opts);
        let checksum = full_checksum(&ip);
        ip[10..12].copy_from_slice(&checksum.to_be_bytes());
        prop_assert_eq!(ones_complement_sum(&ip), 0xffff);
        let tpids: &[u16] = if tagged { &[0x8100] } else { &[] };
        let mut frame = l2(tpids, 0x0800);
        let at = frame.len();
        frame.extend_from_slice(&ip);
        let original = frame.clone();
        prop_assert!(ecn_capable(&frame));
        prop_assert!(mark_ce(&mut frame));
        let header = &frame[at..at + ip.len()];
        prop_assert_eq!(header[1], dscp << 2 | CE);
        let now = u16::from_be_bytes([header[10], header[11]]);
        prop_assert_eq!(now, full_checksum(header));
        prop_assert_eq!(ones_complement_sum(header), 0xffff);
        if ecn == CE {
            prop_assert_eq!(&frame, &original);
        }
    }

    /// Any bytes: `mark_ce` marks exactly what `ecn_capable` calls
    /// ECN-capable, leaves the rest as it was, and a marked frame stays
    /// ECN-capable and is marked again without a change.
    #[test]
    fn any_frame_is_marked_exactly_when_ecn_capable(
        ether_type in prop_oneof![
            Just(0x0800u16), Just(0x86dd), Just(0x8100), Just(0x88a8), Just(0x0806), any::<u16>()
        ],
        body in proptest::collection::vec(any::<u8>(), 0..80),
        first in prop_oneof![Just(0x45u8), Just(0x46), Just(0x60), any::<u8>()],
    ) {
        let mut frame = l2(&[], ether_type);
        frame.push(first);
        frame.extend_from_slice(&body);
        let original = frame.clone();
        let capable = ecn_capable(&frame);
        prop_assert_eq!(mark_ce(&mut frame), capable);
        if capable {
            prop_assert!(ecn_capable(&frame));
            let marked = frame.clone();
            prop_assert!(mark_ce(&mut frame));
            prop_assert_eq!(frame, marked);
        } else {
            prop_assert_eq!(frame, original);
        }
    }
}
