//! A pipe's `corrupt` through the bridge: a packet the pipe marks leaves
//! with exactly one bit flipped after its Ethernet header and VLAN tags,
//! counted `corrupted` once (a duplicated one's two copies carry the same
//! bit), and the same `corrupt_seed` flips the same bits again. In-process,
//! inside a namespace between a sender and a receiver namespace; needs
//! root (else prints "skipped: <reason>").

mod common;

use std::time::Duration;

use common::{frame_receiver, numbered, send_and_stop, Bed};
use pspat_bridge::Report;
use pspat_sched::pipe::{PipeConfig, QueueConfig, QueueLimit};

/// The source MAC address of [`numbered`] frames (never flipped: it is in
/// the L2 header).
const SOURCE: [u8; 6] = [2, 0, 0, 0, 0, 1];

/// `n` numbered UDP frames of 200 bytes, every third one with an 802.1Q
/// tag.
fn frames(n: u32) -> Vec<Vec<u8>> {
    (0..n)
        .map(|seq| {
            let mut f = numbered(5000, seq, 200);
            if seq % 3 == 0 {
                f.splice(12..12, [0x81, 0x00, 0x00, 0x2a]);
            }
            f
        })
        .collect()
}

/// The length of the L2 header of a frame [`frames`] built.
fn l2_len(frame: &[u8]) -> usize {
    if frame[12..14] == [0x81, 0x00] {
        18
    } else {
        14
    }
}

/// The positions of the bits that differ between `a` and `b`.
fn differing_bits(a: &[u8], b: &[u8]) -> Vec<usize> {
    assert_eq!(a.len(), b.len());
    (0..a.len() * 8)
        .filter(|&i| (a[i / 8] ^ b[i / 8]) & (1 << (i % 8)) != 0)
        .collect()
}

/// Sends `sent` through a FIFO pipe corrupting with probability
/// `corrupt` and duplicating with probability `duplicate`, the
/// transmitters seeded with `corrupt_seed`: the final report and every
/// frame from [`SOURCE`] the receiver got, whole, in arrival order (`None`
/// without root).
fn run(
    corrupt_seed: u64,
    corrupt: f64,
    duplicate: f64,
    sent: &[Vec<u8>],
) -> Option<(Report, Vec<Vec<u8>>)> {
    let bed = Bed::new()?;
    let mut cfg = bed.config();
    cfg.corrupt_seed = corrupt_seed;
    let pipe = PipeConfig {
        delay_line_capacity: 8_192,
        queue: QueueConfig {
            limit: QueueLimit::Slots(100_000),
            corrupt,
            duplicate,
            ..QueueConfig::default()
        },
        seed: 5,
        ..PipeConfig::default()
    };
    let bridge = bed.start_pipe(cfg, pipe);
    let receiver = frame_receiver(&bed, |f| f.get(6..12) == Some(&SOURCE[..]));
    let mut tx = bed.sender_socket();
    let (report, _) = send_and_stop(bridge, &mut tx, sent, 16, Duration::from_millis(1));
    let (got, far_drops) = receiver.finish();
    assert_eq!(far_drops, 0, "the test's receiver ring dropped frames");
    Some((report, got))
}

/// Checks a run of `corrupt 1, duplicate 1`: every frame arrives twice in
/// a row, both copies alike, one bit off the frame sent and outside its L2
/// header; returns the flipped bit of each frame.
fn check_every_frame_corrupted_twice(
    report: &Report,
    sent: &[Vec<u8>],
    got: &[Vec<u8>],
) -> Vec<usize> {
    let n = sent.len() as u64;
    assert!(report.conserved, "{report:?}");
    assert_eq!(
        (report.received, report.corrupted, report.duplicated),
        (n, n, n),
        "{report:?}"
    );
    assert_eq!(
        (report.transmitted, report.dropped_total, report.in_flight),
        (2 * n, 0, 0),
        "corruption is neither a drop nor an extra frame: {report:?}"
    );
    let per_flow: u64 = report.flows.iter().map(|f| f.corrupted).sum();
    assert_eq!(per_flow, n);
    assert_eq!(report.egress[0].corrupted, n);
    assert_eq!(got.len(), sent.len() * 2, "every frame twice");
    sent.iter()
        .zip(got.chunks(2))
        .enumerate()
        .map(|(i, (original, pair))| {
            assert_eq!(
                pair[0], pair[1],
                "frame {i}: both copies carry the same bit"
            );
            let diff = differing_bits(original, &pair[0]);
            assert_eq!(diff.len(), 1, "frame {i}: {diff:?}");
            assert!(
                diff[0] >= l2_len(original) * 8,
                "frame {i}: bit {} inside the L2 header",
                diff[0]
            );
            diff[0]
        })
        .collect()
}

#[test]
fn corrupt_one_flips_one_bit_after_the_l2_header_of_every_frame_and_replays_by_seed() {
    let sent = frames(300);
    let Some((report, got)) = run(11, 1.0, 1.0, &sent) else {
        return;
    };
    let bits = check_every_frame_corrupted_twice(&report, &sent, &got);
    // Where the bits fell: spread over the headers and the payload.
    let in_ip_header = bits
        .iter()
        .zip(&sent)
        .filter(|(b, f)| **b < (l2_len(f) + 20) * 8)
        .count();
    println!(
        "corrupt 1, duplicate 1: {} frames, {} bits in the IPv4 header",
        sent.len(),
        in_ip_header
    );
    // The same seed: the same bits; another seed: other bits.
    let Some((report, got)) = run(11, 1.0, 1.0, &sent) else {
        return;
    };
    assert_eq!(
        check_every_frame_corrupted_twice(&report, &sent, &got),
        bits
    );
    let Some((report, got)) = run(12, 1.0, 1.0, &sent) else {
        return;
    };
    let other = check_every_frame_corrupted_twice(&report, &sent, &got);
    let same = other.iter().zip(&bits).filter(|(a, b)| a == b).count();
    // 300 draws over about 1 500 bits each: a handful may coincide.
    assert!(same < 30, "{same} of 300 bits alike under another seed");
}

#[test]
fn frames_the_pipe_does_not_corrupt_arrive_intact() {
    let sent = frames(1000);
    let Some((report, got)) = run(3, 0.3, 0.0, &sent) else {
        return;
    };
    assert!(report.conserved, "{report:?}");
    assert_eq!(report.transmitted, 1000, "{report:?}");
    assert_eq!(got.len(), sent.len());
    let flipped: Vec<usize> = sent
        .iter()
        .zip(&got)
        .map(|(a, b)| differing_bits(a, b).len())
        .collect();
    assert!(flipped.iter().all(|&d| d <= 1), "at most one bit each");
    let corrupted = flipped.iter().filter(|&&d| d == 1).count() as u64;
    println!("corrupt 0.3: {corrupted} of 1000 frames arrived with one bit flipped");
    assert_eq!(corrupted, report.corrupted, "{report:?}");
    // 0.3 of 1000: within the binomial 99.9% interval.
    let (mean, sd) = (300.0, (1000.0f64 * 0.3 * 0.7).sqrt());
    assert!(
        (corrupted as f64 - mean).abs() <= 3.2905 * sd,
        "{corrupted}, expected {mean} ± {:.0}",
        3.2905 * sd
    );
}
