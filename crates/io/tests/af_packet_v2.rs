//! The per-frame TPACKET_V2 RX ring across a veth pair between two
//! namespaces this test makes. Each test needs root: without it, it prints
//! "skipped: <reason>" and returns.

mod common;

use std::time::{Duration, Instant};

use pspat_io::af_packet::{PacketRx, PacketTx, RxConfig, RxRing, TxConfig};
use pspat_io::{FramePool, IoError};

use common::{numbered, receive_numbered, send_all, sequence_of, test_bed};

fn v2() -> RxConfig {
    RxConfig {
        ring: RxRing::V2,
        ..RxConfig::default()
    }
}

#[test]
fn frames_arrive_intact_in_order_in_batches_of_at_most_max_batch() {
    let Some((ns_a, ns_b, pair)) = test_bed() else {
        return;
    };
    let config = RxConfig {
        max_batch: 8,
        ..v2()
    };
    let mut rx = ns_b
        .run(|| PacketRx::open(&pair.b, &config))
        .unwrap()
        .expect("open the V2 RX ring");
    assert_eq!(rx.ring(), RxRing::V2);
    assert_eq!(rx.max_frame(), RxConfig::slot_room(2048));
    let mut tx = ns_a
        .run(|| PacketTx::open(&pair.a, &TxConfig::default()))
        .unwrap()
        .expect("open TX");
    // 3 × 1024 frames of several sizes: more than the ring's 2048 slots
    // in all, so the ring wraps.
    let total = 3072u32;
    let mut received = Vec::new();
    let mut largest = 0;
    for first in (0..total).step_by(64) {
        let frames: Vec<Vec<u8>> = (first..first + 64)
            .map(|s| numbered(s, 3, [18, 200, 1400][s as usize % 3]))
            .collect();
        send_all(&mut tx, &frames);
        let (got, most) = receive_numbered(&mut rx, 64);
        largest = largest.max(most);
        received.extend(got);
    }
    assert_eq!(received.len(), total as usize, "every frame once");
    for (seq, frame) in (0..total).zip(&received) {
        assert_eq!(
            frame,
            &numbered(seq, 3, [18, 200, 1400][seq as usize % 3]),
            "frame {seq} intact and in order"
        );
    }
    assert!(
        (1..=8).contains(&largest),
        "a call gives at most max_batch frames (largest {largest})"
    );
    let stats = rx.stats();
    assert!(stats.packets >= u64::from(total));
    assert_eq!(stats.truncated, 0);
    assert_eq!(
        stats.blocks,
        stats.packets + stats.outgoing,
        "every slot given back once"
    );
    let kernel = rx.kernel_stats().expect("read PACKET_STATISTICS");
    assert!(kernel.packets >= u64::from(total), "{kernel:?}");
    assert_eq!((kernel.drops, kernel.freezes), (0, 0));
}

#[test]
fn a_full_ring_drops_in_the_kernel_and_counts_it() {
    let Some((ns_a, ns_b, pair)) = test_bed() else {
        return;
    };
    // One page-sized block of two slots, two blocks: four slots.
    let config = RxConfig {
        block_size: 4096,
        blocks: 2,
        ..v2()
    };
    let mut rx = ns_b
        .run(|| PacketRx::open(&pair.b, &config))
        .unwrap()
        .expect("open the V2 RX ring");
    let mut tx = ns_a
        .run(|| PacketTx::open(&pair.a, &TxConfig::default()))
        .unwrap()
        .expect("open TX");
    // Nobody reads while 32 frames come: the ring keeps four.
    let frames: Vec<Vec<u8>> = (0..32).map(|s| numbered(s, 1, 18)).collect();
    send_all(&mut tx, &frames);
    // Wait until the kernel accounted for all 32 (delivery is
    // asynchronous), summing its counters (each read resets them).
    let mut kernel_packets = 0;
    let mut kernel_drops = 0;
    let deadline = Instant::now() + Duration::from_secs(2);
    while kernel_packets < 32 && Instant::now() < deadline {
        let k = rx.kernel_stats().expect("read PACKET_STATISTICS");
        kernel_packets += k.packets;
        kernel_drops += k.drops;
        std::thread::sleep(Duration::from_millis(5));
    }
    let (got, _) = receive_numbered(&mut rx, 4);
    let seqs: Vec<u32> = got.iter().filter_map(|f| sequence_of(f)).collect();
    assert!(seqs.len() <= 4, "a four-slot ring kept {seqs:?}");
    assert!(kernel_packets >= 32, "the kernel saw {kernel_packets}");
    assert!(
        kernel_drops + seqs.len() as u64 >= 32,
        "every numbered frame received or dropped: {} received, {kernel_drops} dropped",
        seqs.len()
    );
    assert_eq!(seqs, (0..seqs.len() as u32).collect::<Vec<_>>(), "in order");
    // The ring works again once read.
    send_all(&mut tx, &[numbered(100, 1, 18)]);
    let (got, _) = receive_numbered(&mut rx, 1);
    assert_eq!(got, [numbered(100, 1, 18)]);
}

#[test]
fn a_frame_longer_than_the_slot_is_truncated_and_counted() {
    let Some((ns_a, ns_b, pair)) = test_bed() else {
        return;
    };
    ns_a.ip(&["link", "set", &pair.a, "mtu", "9000"]).unwrap();
    ns_b.ip(&["link", "set", &pair.b, "mtu", "9000"]).unwrap();
    let mut rx = ns_b
        .run(|| PacketRx::open(&pair.b, &v2()))
        .unwrap()
        .expect("open the V2 RX ring");
    let mut tx = ns_a
        .run(|| PacketTx::open(&pair.a, &TxConfig::default()))
        .unwrap()
        .expect("open TX");
    let long = numbered(1, 1, 3000);
    let short = numbered(2, 1, 100);
    send_all(&mut tx, &[long.clone(), short.clone()]);
    let mut seen = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(2);
    while seen.len() < 2 && Instant::now() < deadline {
        rx.recv_with(Duration::from_millis(20), |p| {
            if sequence_of(p.data).is_some() {
                seen.push((p.data.to_vec(), p.wire_len));
            }
        })
        .unwrap();
    }
    assert_eq!(seen.len(), 2, "both frames given");
    let room = RxConfig::slot_room(2048);
    assert_eq!(seen[0].1, long.len(), "the wire length is kept");
    assert_eq!(seen[0].0, long[..room], "the slot's room of the frame");
    assert_eq!(
        seen[1],
        (short.clone(), short.len()),
        "the next frame whole"
    );
    assert_eq!(rx.stats().truncated, 1);
    // recv_into copies what the slot kept; a pool frame too short for a
    // frame drops it, counted.
    send_all(&mut tx, std::slice::from_ref(&long));
    let mut pool = FramePool::new(4, 1024).unwrap();
    let mut out = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(2);
    while rx.stats().too_long == 0 && Instant::now() < deadline {
        rx.recv_into(Duration::from_millis(20), &mut pool, &mut out)
            .unwrap();
    }
    assert_eq!(rx.stats().too_long, 1);
    assert_eq!(rx.stats().truncated, 2);
    assert!(out
        .iter()
        .all(|f| pool.arena().bytes(f).unwrap().len() < 1024));
}

#[test]
fn a_vlan_tag_the_kernel_removed_is_put_back() {
    let Some((ns_a, ns_b, pair)) = test_bed() else {
        return;
    };
    let mut rx = ns_b
        .run(|| PacketRx::open(&pair.b, &v2()))
        .unwrap()
        .expect("open the V2 RX ring");
    let mut tx = ns_a
        .run(|| PacketTx::open(&pair.a, &TxConfig::default()))
        .unwrap()
        .expect("open TX");
    let plain = numbered(7, 1, 40);
    let mut tagged = plain[..12].to_vec();
    tagged.extend_from_slice(&[0x81, 0x00, 0x20, 0x0a]);
    tagged.extend_from_slice(&plain[12..]);
    send_all(&mut tx, std::slice::from_ref(&tagged));
    let mut got = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(2);
    while got.is_empty() && Instant::now() < deadline {
        rx.recv_with(Duration::from_millis(20), |p| {
            if p.data.len() >= plain.len() {
                let mut buffer = vec![0u8; p.frame_len()];
                let n = p.copy_into(&mut buffer).unwrap();
                buffer.truncate(n);
                if buffer.len() == tagged.len() && buffer[12..14] == [0x81, 0x00] {
                    got.push((buffer, p.vlan_tag));
                }
            }
        })
        .unwrap();
    }
    assert_eq!(got.len(), 1, "the tagged frame arrived");
    assert_eq!(got[0].0, tagged, "copied as it was on the wire");
    assert_eq!(
        got[0].1,
        Some((0x8100, 0x200a)),
        "the tag the kernel removed"
    );
}

#[test]
fn a_bad_v2_geometry_is_refused() {
    let Some((_ns_a, ns_b, pair)) = test_bed() else {
        return;
    };
    for config in [
        RxConfig {
            frame_size: 1024,
            ..v2()
        },
        RxConfig {
            frame_size: 3000,
            ..v2()
        },
        RxConfig {
            frame_size: 1 << 19,
            ..v2()
        },
        RxConfig {
            max_batch: 0,
            ..v2()
        },
    ] {
        let error = ns_b
            .run(|| PacketRx::open(&pair.b, &config).unwrap_err())
            .unwrap();
        assert!(
            matches!(error, IoError::BadConfig(_)),
            "{config:?}: {error}"
        );
    }
    assert_eq!(RxConfig::slot_for(1514), 2048);
    assert_eq!(RxConfig::slot_for(9014), 16384);
    assert!(RxConfig::slot_room(RxConfig::slot_for(9014)) >= 9014);
}
