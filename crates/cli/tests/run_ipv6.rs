//! IPv6 through `pspat run` end to end: rules that tell `ip6` from `ip4`,
//! an IPv6 prefix (matched and not) and a `src-ip6` flow mask, with the
//! daemon between three namespaces of the test's own (`common::run_bed`).
//! Frames carry IPv6 addresses in fd00:199::/32 (unique local) and
//! 2001:db8::/32 (documentation) and IPv4 ones in 10.199.0.0/16; nothing
//! leaves the test's namespaces. Skips, saying why, without root.

use std::time::{Duration, Instant};

mod common;

use common::run_bed::{
    check_conservation, check_drop_reasons, ctl_json, finish, pace, pipe, send_all, Bed,
};
use etherparse::PacketBuilder;

/// fd00:199::/32, the addresses this test shapes.
const SHAPED: [u8; 4] = [0xfd, 0x00, 0x01, 0x99];
/// 2001:db8::/32 (documentation), the sources rule 300 denies.
const DENIED: [u8; 4] = [0x20, 0x01, 0x0d, 0xb8];

/// A UDP frame from source `source` of `prefix`::/32 to fd00:199::fe, with
/// the marker `common::run_bed::parse` recognises, `seq`, the port and the
/// source (in the field the IPv4 frames use for a time).
fn ipv6_frame(prefix: [u8; 4], source: u16, dport: u16, seq: u32, len: usize) -> Vec<u8> {
    let mut payload = b"pspat-rn".to_vec();
    payload.extend_from_slice(&seq.to_be_bytes());
    payload.extend_from_slice(&dport.to_be_bytes());
    payload.extend_from_slice(&u64::from(source).to_be_bytes());
    // Ethernet 14, IPv6 40, UDP 8.
    payload.resize(len.max(90) - 62, 0xee);
    let mut src = [0u8; 16];
    src[..4].copy_from_slice(&prefix);
    // Sources differ in their /64 (bytes 6..8), then in their host part.
    src[6..8].copy_from_slice(&(source / 2).to_be_bytes());
    src[15] = 1 + (source % 2) as u8;
    let mut dst = [0u8; 16];
    dst[..4].copy_from_slice(&SHAPED);
    dst[15] = 0xfe;
    let mut out = Vec::with_capacity(len);
    PacketBuilder::ethernet2([2, 0x99, 0, 0, 6, 1], [2, 0x99, 0, 0, 6, 2])
        .ipv6(src, dst, 64)
        .udp(4000, dport)
        .write(&mut out, &payload)
        .expect("build");
    out
}

#[test]
fn ipv6_frames_follow_ip6_rules_prefixes_and_a_src_ip6_mask() {
    let Some(bed) = Bed::new("ipv6", 245) else {
        return;
    };
    // IPv6 from fd00:199::/32 to sched 2, one queue per source /64; IPv4
    // to pipe 1; other IPv6 (a few frames from 2001:db8::/32) denied.
    let config = "\
        pipe 1 config bw 20Mbit/s queue 200\n\
        sched 2 config type qfq bw 4Mbit/s\n\
        queue 21 config sched 2 weight 1 queue 100 mask src-ip6 /64\n\
        add 100 queue 21 ip6 from fd00:199::/32 to any\n\
        add 200 pipe 1 ip4 from any to any\n\
        add 300 deny ip6 from any to any\n";
    let (child, _log) = bed.start(config, &[]);
    let socket = bed.socket();
    let collector = bed.receiver();
    let mut tx = bed.sender_socket();
    // Rounds of 4 ms for 1.2 s: four IPv6 sources (two /64s, two hosts in
    // each) send two 500-byte frames each to port 6006 (8 Mbit/s in all,
    // twice sched 2's rate), and one IPv4 frame goes to port 6004.
    let start = Instant::now();
    let mut seq = 0u32;
    let (mut sent6, mut sent4, mut denied) = (0u64, 0u64, 0u64);
    for round in 0..300u32 {
        let mut batch = Vec::new();
        for _ in 0..2 {
            for source in 0..4u16 {
                seq += 1;
                sent6 += 1;
                batch.push(ipv6_frame(SHAPED, source, 6006, seq, 500));
            }
        }
        seq += 1;
        sent4 += 1;
        batch.push(bed.frame(6004, seq, 0, 500));
        if round % 30 == 0 {
            seq += 1;
            denied += 1;
            batch.push(ipv6_frame(DENIED, 9, 6008, seq, 200));
        }
        send_all(&mut tx, &batch);
        pace(start, Duration::from_millis(4), round);
    }
    let shown = ctl_json(&socket, &["queue", "show", "21"]);
    let rules = ctl_json(&socket, &["show"]);
    std::thread::sleep(Duration::from_millis(1500));
    let doc = finish(child);
    let got = collector.finish();
    check_conservation(&doc);

    // One dynamic queue per source /64: two.
    let queue = &shown["result"]["queues"][0];
    println!("queue 21: {}", queue["dynamic"]);
    assert_eq!(queue["dynamic"]["live"], 2, "{shown}");
    // Rule 100 matched every IPv6 frame of fd00:199::/32, rule 200 every
    // IPv4 one, rule 300 the other IPv6 ones.
    let text = rules["result"].to_string();
    let matched = |n: u64| {
        rules["result"]["rules"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["number"] == n)
            .and_then(|r| r["packets"].as_u64())
    };
    assert_eq!(
        (matched(100), matched(200), matched(300)),
        (Some(sent6), Some(sent4), Some(denied)),
        "{text}"
    );
    assert!(got.iter().all(|a| a.port != 6008), "a denied frame arrived");
    assert!(
        doc["totals"]["dropped"]["filtered"].as_u64() >= Some(denied),
        "{}",
        doc["totals"]
    );
    let p2 = pipe(&doc, 2);
    let p1 = pipe(&doc, 1);
    println!(
        "sched 2 (IPv6): in {} out {} dropped {}; pipe 1 (IPv4): in {} out {}; rules {text}",
        p2["in_packets"],
        p2["out_packets"],
        p2["dropped_total"],
        p1["in_packets"],
        p1["out_packets"]
    );
    assert_eq!(p2["in_packets"].as_u64(), Some(sent6), "{p2}");
    assert_eq!(p1["in_packets"].as_u64(), Some(sent4), "{p1}");
    assert_eq!(p1["dropped_total"], 0, "{p1}");
    // Sched 2 carried its rate's worth and dropped the rest by its limit.
    let out6 = p2["out_packets"].as_u64().unwrap();
    assert!(out6 < sent6, "sched 2 is over its rate: {p2}");
    check_drop_reasons(p2, &["flow_limit"]);
    // Every frame each link sent arrived, in order per source.
    let v6: Vec<_> = got.iter().filter(|a| a.port == 6006).collect();
    let v4: Vec<_> = got.iter().filter(|a| a.port == 6004).collect();
    assert_eq!(v6.len() as u64, out6);
    assert_eq!(v4.len() as u64, sent4);
    for source in 0..4u64 {
        let seqs: Vec<u32> = v6
            .iter()
            .filter(|a| a.sent == source)
            .map(|a| a.seq)
            .collect();
        assert!(
            seqs.windows(2).all(|w| w[0] < w[1]),
            "source {source} reordered"
        );
        // Two queues of weight 1 share the link; each source got a fair
        // part (its queue's half, split with its /64 neighbour).
        assert!(
            seqs.len() as u64 > out6 / 8,
            "source {source}: {} of {out6}",
            seqs.len()
        );
    }
}
