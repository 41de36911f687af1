//! A pipe's RED with `ecn` through the bridge: behind a slow pipe whose
//! RED marks every packet once two are queued, ECN-capable frames
//! (IPv4 ECT(0) and ECT(1), untagged and 802.1Q-tagged, and IPv6 ECT(0))
//! arrive either as sent or with their ECN field set to CE (3) and nothing
//! else changed but a right IPv4 header checksum, counted `ce_marked`;
//! Not-ECT frames are never marked (RED drops them instead) and arrive as
//! sent. In-process, inside a namespace between a sender and a receiver
//! namespace; needs root (else prints "skipped: <reason>").

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::{frame_receiver, numbered, numbered_id, send_and_stop, Bed, MAGIC};
use etherparse::{Ipv4HeaderSlice, PacketBuilder};
use pspat_bridge::TxReason;
use pspat_sched::pipe::{PipeConfig, QueueConfig, QueueLimit, Red};
use pspat_sched::Rate;

/// A frame as sent, where its IP header starts, and its IP version.
struct Sent {
    frame: Vec<u8>,
    ip_at: usize,
    v6: bool,
}

impl Sent {
    fn ecn(&self) -> u8 {
        ecn_of(&self.frame, self.ip_at, self.v6)
    }
}

fn ecn_of(frame: &[u8], at: usize, v6: bool) -> u8 {
    if v6 {
        (frame[at + 1] >> 4) & 3
    } else {
        frame[at + 1] & 3
    }
}

/// [`numbered`] with TOS `tos` (its checksum recomputed), 802.1Q-tagged
/// when `tagged`.
fn ipv4(seq: u32, tos: u8, tagged: bool) -> Sent {
    let mut f = numbered(5000, seq, 300);
    f[15] = tos;
    let header = Ipv4HeaderSlice::from_slice(&f[14..]).expect("IPv4");
    let checksum = header.to_header().calc_header_checksum();
    f[24..26].copy_from_slice(&checksum.to_be_bytes());
    let mut ip_at = 14;
    if tagged {
        f.splice(12..12, [0x81, 0x00, 0x00, 0x2a]);
        ip_at = 18;
    }
    Sent {
        frame: f,
        ip_at,
        v6: false,
    }
}

/// An IPv6/UDP frame carrying the marker and `seq` (as [`numbered`]),
/// with traffic class `class`.
fn ipv6(seq: u32, class: u8) -> Sent {
    let mut payload = MAGIC.to_vec();
    payload.extend_from_slice(&seq.to_be_bytes());
    payload.extend_from_slice(&5000u16.to_be_bytes());
    payload.resize(300 - 62, 0xee);
    let mut f = Vec::new();
    PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
        .ipv6([0xfd; 16], [0xfe; 16], 64)
        .udp(4000, 5000)
        .write(&mut f, &payload)
        .expect("build");
    f[14] = (f[14] & 0xf0) | class >> 4;
    f[15] = (f[15] & 0x0f) | class << 4;
    Sent {
        frame: f,
        ip_at: 14,
        v6: true,
    }
}

/// Checks that `got` is `sent` marked CE: the ECN field 3, the DSCP and
/// every other byte as sent but the IPv4 header checksum, which is right.
fn check_marked(sent: &Sent, got: &[u8], what: &str) {
    assert_eq!(got.len(), sent.frame.len(), "{what}");
    let at = sent.ip_at;
    assert_eq!(ecn_of(got, at, sent.v6), 3, "{what}");
    let changed: Vec<usize> = (0..got.len())
        .filter(|&i| got[i] != sent.frame[i])
        .collect();
    if sent.v6 {
        assert_eq!(changed, [at + 1], "{what}: only the traffic class byte");
        assert_eq!(got[at + 1] & 0xcf, sent.frame[at + 1] & 0xcf, "{what}");
    } else {
        assert!(
            changed
                .iter()
                .all(|i| [at + 1, at + 10, at + 11].contains(i)),
            "{what}: {changed:?}"
        );
        assert_eq!(got[at + 1] >> 2, sent.frame[at + 1] >> 2, "{what}: DSCP");
        let header = Ipv4HeaderSlice::from_slice(&got[at..]).expect("IPv4");
        assert_eq!(
            header.header_checksum(),
            header.to_header().calc_header_checksum(),
            "{what}: the checksum a full recomputation gives"
        );
    }
}

#[test]
fn red_with_ecn_marks_ecn_capable_frames_ce_and_leaves_the_rest() {
    let Some(bed) = Bed::new() else {
        return;
    };
    // Four kinds in turn: IPv4 ECT(0), IPv4 Not-ECT, tagged IPv4 ECT(1),
    // IPv6 ECT(0); DSCP AF11 on all.
    let n = 400u32;
    let sent: Vec<Sent> = (0..n)
        .map(|seq| match seq % 4 {
            0 => ipv4(seq, 0x28 | 2, false),
            1 => ipv4(seq, 0x28, false),
            2 => ipv4(seq, 0x28 | 1, true),
            _ => ipv6(seq, 0x28 | 2),
        })
        .collect();
    let by_id: BTreeMap<(u16, u32), &Sent> = sent
        .iter()
        .map(|s| (numbered_id(&s.frame).expect("numbered"), s))
        .collect();
    let pipe = PipeConfig {
        // 400 frames of 300 bytes: about 50 ms to drain, so a burst
        // queues.
        bw: Some(Rate::checked("bw", 20_000_000u64).expect("a rate")),
        delay_line_capacity: 8_192,
        queue: QueueConfig {
            limit: QueueLimit::Slots(100_000),
            red: Some(Red {
                gentle: false,
                w_q: 1.0,
                min_th: 1,
                max_th: 2,
                max_p: 1.0,
            }),
            ecn: true,
            ..QueueConfig::default()
        },
        seed: 5,
        ..PipeConfig::default()
    };
    let bridge = bed.start_pipe(bed.config(), pipe);
    let receiver = frame_receiver(&bed, |f| numbered_id(f).is_some());
    let mut tx = bed.sender_socket();
    let frames: Vec<Vec<u8>> = sent.iter().map(|s| s.frame.clone()).collect();
    let (report, _) = send_and_stop(bridge, &mut tx, &frames, 64, Duration::ZERO);
    let (got, far_drops) = receiver.finish();
    assert_eq!(far_drops, 0, "the test's receiver ring dropped frames");
    assert!(report.conserved, "{report:?}");
    assert_eq!(report.transmitted, got.len() as u64, "{report:?}");

    let mut marked_arrived = 0u64;
    let mut by_kind = [[0u32; 2]; 4];
    for frame in &got {
        let id = numbered_id(frame).expect("numbered");
        let s = by_id[&id];
        let kind = (id.1 % 4) as usize;
        let what = format!("frame {} (kind {kind})", id.1);
        if frame == &s.frame {
            by_kind[kind][0] += 1;
            continue;
        }
        assert_ne!(s.ecn(), 0, "{what}: a Not-ECT frame changed");
        check_marked(s, frame, &what);
        by_kind[kind][1] += 1;
        marked_arrived += 1;
    }
    println!("arrived (as sent, marked CE) by kind: {by_kind:?}; {report:?}");
    assert_eq!(by_kind[1][1], 0, "Not-ECT frames are never marked");
    for kind in [0, 2, 3] {
        assert!(by_kind[kind][1] > 0, "kind {kind} marked: {by_kind:?}");
    }
    // Every packet the pipe marked was marked by the transmitter, and
    // arrived unless a transmitter dropped it.
    let tx_drops: u64 = TxReason::ALL
        .iter()
        .filter_map(|r| report.dropped.get(r.name()))
        .sum();
    assert_eq!(report.ce_unmarkable, 0, "{report:?}");
    assert!(
        report.ce_marked >= marked_arrived && report.ce_marked <= marked_arrived + tx_drops,
        "{marked_arrived} arrived marked: {report:?}"
    );
    let per_flow: u64 = report.flows.iter().map(|f| f.ce_marked).sum();
    assert_eq!(per_flow, report.ce_marked);
    assert_eq!(report.egress[0].ce_marked, report.ce_marked);
    // RED drops Not-ECT frames where it marks the others.
    assert!(
        report.dropped.get("red").copied().unwrap_or(0) > 0,
        "{report:?}"
    );
}
