//! AF_PACKET across a veth pair between two namespaces this test makes.
//! Each test needs root: without it, it prints "skipped: <reason>" and
//! returns.
#![allow(unsafe_code)]

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use pspat_io::af_packet::{PacketRx, PacketTx, PacketTxRing, RxConfig, RxRing, TxConfig};
use pspat_io::netns;
use pspat_io::parse::{ParseLimits, ParseReason, ParseStats};
use pspat_io::{FramePool, IoError};

use common::{sequence_of, test_bed};

/// A numbered 60-byte frame (18 bytes of payload).
fn numbered(seq: u32, flow: u16) -> Vec<u8> {
    common::numbered(seq, flow, 18)
}

/// One receive call of up to `timeout`: the sequence numbers of the
/// numbered frames that came, each checked intact.
/// A receiving socket on `pair.b` (in `ns_b`) with the default ring.
fn default_rx(ns_b: &netns::Namespace, pair: &netns::VethPair) -> PacketRx {
    ns_b.run(|| PacketRx::open(&pair.b, &RxConfig::default()))
        .unwrap()
        .expect("open RX")
}

/// A sending socket on `pair.a` (in `ns_a`), `sendmmsg(2)` by default.
fn default_tx(ns_a: &netns::Namespace, pair: &netns::VethPair) -> PacketTx {
    ns_a.run(|| PacketTx::open(&pair.a, &TxConfig::default()))
        .unwrap()
        .expect("open TX")
}

fn receive_once(
    rx: &mut PacketRx,
    pool: &mut FramePool,
    timeout: Duration,
) -> Result<Vec<u32>, IoError> {
    let arena = std::sync::Arc::clone(pool.arena());
    let mut frames = Vec::new();
    let outcome = rx.recv_into(timeout, pool, &mut frames);
    let mut got = Vec::new();
    for frame in frames {
        let bytes = arena.bytes(&frame).unwrap();
        if let Some(seq) = sequence_of(bytes) {
            assert_eq!(
                bytes,
                numbered(seq, (seq % 64) as u16),
                "frame {seq} intact"
            );
            got.push(seq);
        }
        pool.recycle(frame).unwrap();
    }
    outcome.map(|_| got)
}

/// Receives until `want` more numbered frames arrived or a second passed.
fn receive_numbered(rx: &mut PacketRx, pool: &mut FramePool, want: usize) -> Vec<u32> {
    let deadline = Instant::now() + Duration::from_secs(1);
    let mut got = Vec::new();
    while got.len() < want && Instant::now() < deadline {
        got.extend(receive_once(rx, pool, Duration::from_millis(20)).expect("receive"));
    }
    got
}

fn every_frame_arrives(
    mut send: impl FnMut(&[&[u8]]) -> Result<usize, IoError>,
    rx: &mut PacketRx,
) {
    let mut pool = FramePool::new(256, 2048).unwrap();
    let total = 1024u32;
    let mut received = Vec::new();
    for first in (0..total).step_by(32) {
        let frames: Vec<Vec<u8>> = (first..first + 32)
            .map(|s| numbered(s, (s % 64) as u16))
            .collect();
        let views: Vec<&[u8]> = frames.iter().map(Vec::as_slice).collect();
        let mut offset = 0;
        let deadline = Instant::now() + Duration::from_secs(1);
        while offset < views.len() && Instant::now() < deadline {
            offset += send(&views[offset..]).expect("send");
        }
        assert_eq!(offset, views.len(), "the batch from {first} was taken");
        received.extend(receive_numbered(rx, &mut pool, 32));
    }
    received.sort_unstable();
    assert_eq!(received, (0..total).collect::<Vec<_>>(), "every frame once");
    assert_eq!(pool.free_count(), 256, "every frame recycled");
    let stats = rx.stats();
    assert_eq!(stats.no_frame + stats.too_long, 0);
    assert!(stats.packets >= u64::from(total));
}

#[test]
fn sendmmsg_frames_cross_the_veth_pair_intact() {
    let Some((ns_a, ns_b, pair)) = test_bed() else {
        return;
    };
    let mut rx = default_rx(&ns_b, &pair);
    let mut tx = default_tx(&ns_a, &pair);
    every_frame_arrives(|frames| tx.send_batch(frames), &mut rx);
    let stats = tx.stats();
    assert_eq!((stats.sent, stats.failed), (1024, 0));
    assert_eq!(stats.bytes, 1024 * 60);
}

#[test]
fn tx_ring_frames_cross_the_veth_pair_intact_with_qdisc_bypass() {
    let Some((ns_a, ns_b, pair)) = test_bed() else {
        return;
    };
    let mut rx = default_rx(&ns_b, &pair);
    let config = TxConfig {
        qdisc_bypass: true,
        ring_frames: 64,
        ..TxConfig::default()
    };
    let mut tx = ns_a
        .run(|| PacketTxRing::open(&pair.a, &config))
        .unwrap()
        .expect("open the TX ring");
    every_frame_arrives(|frames| tx.send_batch(frames), &mut rx);
    assert_eq!((tx.stats().sent, tx.stats().failed), (1024, 0));
    let long = vec![0u8; tx.max_frame() + 1];
    assert!(matches!(
        tx.send_batch(&[&long]),
        Err(IoError::FrameTooLong { .. })
    ));
}

#[test]
fn fanout_spreads_flows_over_two_sockets_and_loses_none() {
    // Both RX rings: the block ring (V3) and the per-frame ring (V2).
    for (ring, group) in [(RxRing::V3, 7), (RxRing::V2, 9)] {
        fanout_over_two_sockets(ring, group);
    }
}

fn fanout_over_two_sockets(ring: RxRing, group: u16) {
    let Some((ns_a, ns_b, pair)) = test_bed() else {
        return;
    };
    let config = RxConfig {
        fanout: Some(group),
        ring,
        ..RxConfig::default()
    };
    let (mut rx1, mut rx2) = ns_b
        .run(|| {
            (
                PacketRx::open(&pair.b, &config).expect("open RX 1"),
                PacketRx::open(&pair.b, &config).expect("open RX 2"),
            )
        })
        .unwrap();
    let mut tx = default_tx(&ns_a, &pair);
    let mut pool = FramePool::new(256, 2048).unwrap();
    let (mut got1, mut got2) = (Vec::new(), Vec::new());
    for first in (0..256u32).step_by(32) {
        let frames: Vec<Vec<u8>> = (first..first + 32)
            .map(|s| numbered(s, (s % 64) as u16))
            .collect();
        let views: Vec<&[u8]> = frames.iter().map(Vec::as_slice).collect();
        assert_eq!(tx.send_batch(&views).unwrap(), 32);
        let deadline = Instant::now() + Duration::from_secs(1);
        let target = got1.len() + got2.len() + 32;
        while got1.len() + got2.len() < target && Instant::now() < deadline {
            let wait = Duration::from_millis(5);
            got1.extend(receive_once(&mut rx1, &mut pool, wait).unwrap());
            got2.extend(receive_once(&mut rx2, &mut pool, wait).unwrap());
        }
    }
    assert!(
        !got1.is_empty() && !got2.is_empty(),
        "{} / {}",
        got1.len(),
        got2.len()
    );
    let mut all: Vec<u32> = got1.iter().chain(&got2).copied().collect();
    all.sort_unstable();
    assert_eq!(all, (0..256).collect::<Vec<_>>());
    // One flow (source port) goes to one socket only.
    let flows = |got: &[u32]| {
        got.iter()
            .map(|s| s % 64)
            .collect::<std::collections::BTreeSet<_>>()
    };
    assert!(flows(&got1).is_disjoint(&flows(&got2)));
}

#[test]
fn malformed_frames_on_the_wire_are_counted_by_reason() {
    let Some((ns_a, ns_b, pair)) = test_bed() else {
        return;
    };
    // Jumbo MTU on the link so a frame above the parser's 1500-byte MTU
    // can travel.
    ns_a.ip(&["link", "set", &pair.a, "mtu", "9000"]).unwrap();
    ns_b.ip(&["link", "set", &pair.b, "mtu", "9000"]).unwrap();
    let mut rx = default_rx(&ns_b, &pair);
    let mut tx = default_tx(&ns_a, &pair);
    // Not sent: a frame shorter than an Ethernet header (the kernel pads
    // it to 14 bytes) and a cut VLAN tag (the receiving kernel drops it
    // before packet sockets see it); both are covered by tests/parse.rs.
    let cases: Vec<_> = common::malformed()
        .into_iter()
        .filter(|(_, _, reason)| {
            !matches!(
                reason,
                ParseReason::TruncatedEthernet | ParseReason::TruncatedVlan
            )
        })
        .collect();
    let mut expected: BTreeMap<&str, u64> = BTreeMap::new();
    for (name, frame, reason) in &cases {
        assert_eq!(tx.send_batch(&[frame]).unwrap(), 1, "{name} sent");
        *expected.entry(reason.counter_name()).or_default() += 1;
    }
    let good = common::udp4(1, 2, b"fine");
    assert_eq!(tx.send_batch(&[&good]).unwrap(), 1);
    let limits = ParseLimits::for_mtu(1500);
    let mut stats = ParseStats::default();
    let deadline = Instant::now() + Duration::from_secs(2);
    while stats.parsed + stats.refused_total() < cases.len() as u64 + 1 && Instant::now() < deadline
    {
        rx.recv_with(Duration::from_millis(20), |packet| {
            let mut buffer = [0u8; 2048];
            let len = packet.copy_into(&mut buffer).expect("fits");
            stats.parse(&buffer[..len], &limits).ok();
        })
        .unwrap();
    }
    let counted: BTreeMap<&str, u64> = stats.counters().filter(|(_, n)| *n > 0).collect();
    assert_eq!(counted, expected);
    // The kernel strips the outer VLAN tag on reception: the two
    // too_many_vlan_tags counts above prove the copy put it back.
    assert_eq!(stats.parsed, 1);
}

#[test]
fn a_removed_interface_gives_link_lost_and_consistent_counters() {
    let Some((ns_a, ns_b, pair)) = test_bed() else {
        return;
    };
    let mut rx = default_rx(&ns_b, &pair);
    let mut tx = default_tx(&ns_a, &pair);
    let mut ring = ns_a
        .run(|| PacketTxRing::open(&pair.a, &TxConfig::default()))
        .unwrap()
        .expect("open TX ring");
    let mut pool = FramePool::new(512, 2048).unwrap();
    let frames: Vec<Vec<u8>> = (0..16).map(|s| numbered(s, s as u16)).collect();
    let views: Vec<&[u8]> = frames.iter().map(Vec::as_slice).collect();
    let mut offered = 0u64;
    let mut received = 0usize;
    let mut tx_error = None;
    for round in 0..200 {
        if round == 20 {
            pair.remove().expect("remove the pair");
        }
        match tx.send_batch(&views) {
            Ok(n) => offered += n as u64,
            Err(error) => {
                offered += views.len() as u64;
                tx_error = Some(error);
                break;
            }
        }
        // The receiver may notice first; it keeps saying so (checked below).
        if let Ok(got) = receive_once(&mut rx, &mut pool, Duration::from_millis(5)) {
            received += got.len();
        }
    }
    let tx_error = tx_error.expect("a send after the removal fails");
    assert!(tx_error.is_link_lost(), "{tx_error}");
    let stats = tx.stats();
    assert_eq!(stats.sent + stats.failed, offered);
    assert_eq!(stats.failed, 16);
    let ring_error = ring.send_batch(&views).expect_err("the TX ring fails too");
    assert!(ring_error.is_link_lost(), "{ring_error}");
    assert_eq!(ring.stats().failed, 16);
    let mut rx_error = None;
    let mut frames_left = Vec::new();
    for _ in 0..100 {
        match rx.recv_into(Duration::from_millis(10), &mut pool, &mut frames_left) {
            Ok(_) => {}
            Err(error) => {
                rx_error = Some(error);
                break;
            }
        }
    }
    received += frames_left.len();
    for frame in frames_left {
        pool.recycle(frame).unwrap();
    }
    let rx_error = rx_error.expect("the receiver notices");
    assert!(rx_error.is_link_lost(), "{rx_error}");
    let again = rx.recv_with(Duration::from_millis(1), |_| {}).unwrap_err();
    assert!(
        again.is_link_lost(),
        "the receiver keeps saying so: {again}"
    );
    assert!(received as u64 <= stats.sent);
    assert!(
        received >= 16 * 19,
        "frames before the removal arrived ({received})"
    );
    assert_eq!(rx.stats().no_frame, 0);
}

#[test]
fn opening_reports_bad_names_missing_and_down_interfaces() {
    let Some((ns_a, _ns_b, pair)) = test_bed() else {
        return;
    };
    let config = RxConfig::default();
    let outcome = ns_a.run(|| {
        let long = PacketRx::open("pspat-0123456789", &config).unwrap_err();
        let missing = PacketTx::open("pspat-nosuch", &TxConfig::default()).unwrap_err();
        (long, missing)
    });
    let (long, missing) = outcome.unwrap();
    assert!(
        matches!(long, IoError::BadInterfaceName(ref n) if n.len() == 16),
        "{long}"
    );
    assert!(matches!(missing, IoError::NoSuchInterface(_)), "{missing}");
    ns_a.ip(&["link", "set", &pair.a, "down"]).unwrap();
    let down = ns_a
        .run(|| PacketRx::open(&pair.a, &config).unwrap_err())
        .unwrap();
    assert!(matches!(down, IoError::InterfaceDown(_)), "{down}");
    let bad = ns_a
        .run(|| {
            PacketRx::open(
                &pair.a,
                &RxConfig {
                    block_size: 5000,
                    ..RxConfig::default()
                },
            )
            .unwrap_err()
        })
        .unwrap();
    assert!(matches!(bad, IoError::BadConfig(_)), "{bad}");
}

#[test]
fn an_unprivileged_thread_gets_permission_denied() {
    if let Some(reason) = netns::unavailable() {
        println!("skipped: {reason}");
        return;
    }
    let error = std::thread::spawn(|| {
        // SAFETY: the raw system call changes the credentials of this
        // thread only (glibc's setresuid would change every thread's);
        // the thread ends right after.
        let rc = unsafe { libc::syscall(libc::SYS_setresuid, 65534, 65534, 65534) };
        assert_eq!(rc, 0, "drop to nobody");
        PacketRx::open("lo", &RxConfig::default()).unwrap_err()
    })
    .join()
    .unwrap();
    assert!(matches!(error, IoError::PermissionDenied { .. }), "{error}");
}

#[test]
fn pool_frames_are_sent_from_the_pool_by_both_senders() {
    let Some((ns_a, ns_b, pair)) = test_bed() else {
        return;
    };
    let mut rx = default_rx(&ns_b, &pair);
    let (mut tx, mut ring) = ns_a
        .run(|| {
            (
                PacketTx::open(&pair.a, &TxConfig::default()).expect("open TX"),
                PacketTxRing::open(&pair.a, &TxConfig::default()).expect("open TX ring"),
            )
        })
        .unwrap();
    let mut tx_pool = FramePool::new(64, 2048).unwrap();
    let arena = std::sync::Arc::clone(tx_pool.arena());
    let mut frames = Vec::new();
    for seq in 0..64u32 {
        let mut frame = tx_pool.alloc().unwrap();
        arena
            .write(&mut frame, &numbered(seq, (seq % 64) as u16))
            .unwrap();
        frames.push(frame);
    }
    assert_eq!(tx.send_frames(&arena, &frames[..32]).unwrap(), 32);
    assert_eq!(ring.send_frames(&arena, &frames[32..]).unwrap(), 32);
    let mut rx_pool = FramePool::new(128, 2048).unwrap();
    let mut got = receive_numbered(&mut rx, &mut rx_pool, 64);
    got.sort_unstable();
    assert_eq!(got, (0..64).collect::<Vec<_>>());
    // A token of another pool is refused before anything is sent.
    let other = FramePool::new(1, 64).unwrap();
    let error = tx.send_frames(other.arena(), &frames[..1]).unwrap_err();
    assert!(matches!(error, IoError::Frame(_)), "{error}");
    assert_eq!(tx.stats().sent, 32);
    for frame in frames {
        tx_pool.recycle(frame).unwrap();
    }
    // The length rule: MTU + 14 untagged, 4 more with a VLAN tag.
    let max = tx.max_frame();
    let mut tagged = vec![0u8; max + 4];
    tagged[12..14].copy_from_slice(&[0x81, 0x00]);
    assert_eq!(tx.send_batch(&[&tagged]).unwrap(), 1);
    let untagged = vec![0u8; max + 1];
    let error = tx.send_batch(&[&untagged]).unwrap_err();
    assert!(matches!(error, IoError::FrameTooLong { len, max: m } if len == max + 1 && m == max));
}

#[test]
fn a_link_set_down_gives_link_lost_to_both_senders_and_the_receiver() {
    let Some((ns_a, ns_b, pair)) = test_bed() else {
        return;
    };
    let mut rx = default_rx(&ns_b, &pair);
    let (mut tx, mut ring) = ns_a
        .run(|| {
            (
                PacketTx::open(&pair.a, &TxConfig::default()).expect("open TX"),
                PacketTxRing::open(&pair.a, &TxConfig::default()).expect("open TX ring"),
            )
        })
        .unwrap();
    let frame = numbered(0, 0);
    assert_eq!(tx.send_batch(&[&frame]).unwrap(), 1);
    let mut pool = FramePool::new(16, 2048).unwrap();
    assert_eq!(receive_numbered(&mut rx, &mut pool, 1), [0]);
    ns_a.ip(&["link", "set", &pair.a, "down"]).unwrap();
    ns_b.ip(&["link", "set", &pair.b, "down"]).unwrap();
    let error = tx.send_batch(&[&frame]).unwrap_err();
    assert!(error.is_link_lost(), "{error}");
    let error = ring.send_batch(&[&frame]).unwrap_err();
    assert!(error.is_link_lost(), "{error}");
    let error = rx
        .recv_with(Duration::from_millis(100), |_| {})
        .unwrap_err();
    assert!(error.is_link_lost(), "{error}");
    assert_eq!((tx.stats().sent, tx.stats().failed), (1, 1));
    assert_eq!((ring.stats().sent, ring.stats().failed), (0, 1));
}

/// A raised [`pspat_io::StopLatch`] ends a long wait for frames at once,
/// and every later one; frames that arrive are still given.
#[test]
fn a_raised_stop_latch_ends_a_long_wait_for_frames() {
    let Some((ns_a, ns_b, pair)) = test_bed() else {
        return;
    };
    let mut rx = default_rx(&ns_b, &pair);
    let mut tx = default_tx(&ns_a, &pair);
    let latch = std::sync::Arc::new(pspat_io::StopLatch::new().unwrap());
    rx.stop_waits_on(std::sync::Arc::clone(&latch));
    // Not raised: a frame ends the wait as before.
    let frame = numbered(7, 1);
    assert_eq!(tx.send_batch(&[frame.as_slice()]).unwrap(), 1);
    let mut seqs = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(2);
    while seqs.is_empty() && Instant::now() < deadline {
        rx.recv_with(Duration::from_secs(1), |p| seqs.extend(sequence_of(p.data)))
            .unwrap();
    }
    assert_eq!(seqs, vec![7]);
    let raiser = {
        let latch = std::sync::Arc::clone(&latch);
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            latch.raise();
        })
    };
    let begun = Instant::now();
    // The namespaces' own frames (IPv6 neighbour discovery) may end a wait
    // first: wait again until one ends with nothing.
    while rx.recv_with(Duration::from_secs(30), |_| {}).unwrap() > 0 {}
    let waited = begun.elapsed();
    raiser.join().unwrap();
    assert!(
        waited >= Duration::from_millis(40) && waited < Duration::from_secs(10),
        "{waited:?}"
    );
    // Raised for good: a later wait ends at once too.
    let begun = Instant::now();
    while rx.recv_with(Duration::from_secs(30), |_| {}).unwrap() > 0 {}
    assert!(begun.elapsed() < Duration::from_secs(10));
}
