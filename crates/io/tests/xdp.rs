//! AF_XDP sockets across a veth pair between two namespaces this test
//! makes (feature `xdp`). Each test needs root: without it, it prints
//! "skipped: <reason>" and returns. Each test has its own namespaces and
//! pair, removed at its end.
#![cfg(feature = "xdp")]

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use pspat_io::af_packet::{PacketRx, PacketTx, RxConfig, RxRing, TxConfig};
use pspat_io::netns::Namespace;
use pspat_io::xdp::{AttachMode, XdpConfig, XdpError, XdpSocket};
use pspat_io::IoError;

use common::{numbered, receive_numbered, send_all, sequence_of, test_bed};

/// Payload sizes the numbered frames cycle through (frames of 60, 242 and
/// 1442 bytes).
const SIZES: [usize; 3] = [18, 200, 1400];

fn frame(seq: u32) -> Vec<u8> {
    numbered(seq, 7, SIZES[seq as usize % SIZES.len()])
}

fn config(attach: AttachMode) -> XdpConfig {
    XdpConfig {
        attach,
        ..XdpConfig::default()
    }
}

/// What `ip -d link show` prints about `interface`.
fn link_details(namespace: &Namespace, interface: &str) -> String {
    let output = Command::new("ip")
        .args([
            "-n",
            namespace.name(),
            "-d",
            "link",
            "show",
            "dev",
            interface,
        ])
        .output()
        .expect("run ip link show");
    assert!(output.status.success(), "ip link show {interface}");
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// Whether `ip -d link show` lists an XDP program on `interface`.
fn has_xdp_program(namespace: &Namespace, interface: &str) -> bool {
    link_details(namespace, interface).contains("prog/xdp")
}

/// Receives numbered frames through the AF_XDP socket until `want`
/// arrived or two seconds passed.
fn receive_xdp(rx: &mut XdpSocket, want: usize) -> Vec<Vec<u8>> {
    let mut got = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(2);
    while got.len() < want && Instant::now() < deadline {
        rx.recv_with(Duration::from_millis(20), |bytes| {
            if sequence_of(bytes).is_some() {
                got.push(bytes.to_vec());
            }
        })
        .expect("receive");
    }
    got
}

/// 1000 numbered frames of three sizes sent by AF_PACKET into end `a`
/// arrive through an AF_XDP socket on end `b`, intact, in order, once
/// each. `None` when the kernel refused the mode (printed).
fn frames_arrive_through_xdp(mode: AttachMode) -> Option<()> {
    let (ns_a, ns_b, pair) = test_bed()?;
    let opened = ns_b
        .run(|| XdpSocket::open(&pair.b, 0, &config(mode)))
        .unwrap();
    let mut rx = match opened {
        Err(XdpError::AttachRefused { source, .. }) if mode == AttachMode::Driver => {
            println!("skipped: the kernel refused driver-mode XDP on veth: {source}");
            return None;
        }
        other => other.expect("open the AF_XDP socket"),
    };
    assert_eq!(rx.mode(), mode);
    assert!(!rx.zero_copy(), "copy mode by default");
    // iproute2 names the attachment "xdp" in driver mode and
    // "xdpgeneric" in skb mode on the link's first line.
    let details = link_details(&ns_b, &pair.b);
    let word = if mode == AttachMode::Skb {
        " xdpgeneric "
    } else {
        " xdp "
    };
    assert!(details.contains(word), "{mode} mode shown: {details}");
    assert!(details.contains("prog/xdp"), "{details}");
    let mut tx = ns_a
        .run(|| PacketTx::open(&pair.a, &TxConfig::default()))
        .unwrap()
        .expect("open AF_PACKET TX");
    let total = 1000u32;
    let mut received = Vec::new();
    for first in (0..total).step_by(50) {
        let frames: Vec<Vec<u8>> = (first..(first + 50).min(total)).map(frame).collect();
        send_all(&mut tx, &frames);
        received.extend(receive_xdp(&mut rx, frames.len()));
    }
    assert_eq!(received.len(), total as usize, "every frame once");
    for (seq, bytes) in (0..total).zip(&received) {
        assert_eq!(bytes, &frame(seq), "frame {seq} intact and in order");
    }
    let stats = rx.stats();
    assert_eq!(stats.rx_packets, u64::from(total), "nothing else arrived");
    assert_eq!(stats.rx_invalid, 0);
    let bytes: u64 = (0..total).map(|s| frame(s).len() as u64).sum();
    assert_eq!(stats.rx_bytes, bytes);
    let kernel = rx.kernel_stats().expect("read XDP_STATISTICS");
    assert_eq!(
        (
            kernel.rx_dropped,
            kernel.rx_ring_full,
            kernel.rx_invalid_descs
        ),
        (0, 0, 0),
        "{kernel:?}"
    );
    Some(())
}

#[test]
fn frames_sent_into_the_pair_arrive_through_xdp_in_skb_mode() {
    frames_arrive_through_xdp(AttachMode::Skb);
}

#[test]
fn frames_sent_into_the_pair_arrive_through_xdp_in_driver_mode() {
    frames_arrive_through_xdp(AttachMode::Driver);
}

#[test]
fn frames_sent_by_xdp_arrive_at_the_peer_intact_and_counted() {
    frames_sent_by_xdp_arrive(true);
}

#[test]
fn without_need_wakeup_every_send_kicks_and_frames_still_arrive() {
    frames_sent_by_xdp_arrive(false);
}

/// 1000 numbered frames sent by the AF_XDP socket on `b` arrive through a
/// TPACKET_V2 ring on `a`, intact, in order, once each, every one reported
/// sent; bad frames are refused, typed and counted.
fn frames_sent_by_xdp_arrive(need_wakeup: bool) {
    let Some((ns_a, ns_b, pair)) = test_bed() else {
        return;
    };
    let config = XdpConfig {
        need_wakeup,
        ..XdpConfig::default()
    };
    let v2 = RxConfig {
        ring: RxRing::V2,
        ..RxConfig::default()
    };
    let mut rx = ns_a
        .run(|| PacketRx::open(&pair.a, &v2))
        .unwrap()
        .expect("open AF_PACKET RX");
    let mut xsk = ns_b
        .run(|| XdpSocket::open(&pair.b, 0, &config))
        .unwrap()
        .expect("open the AF_XDP socket");
    assert_eq!(xsk.max_frame(), 1514);
    let total = 1000u32;
    let mut received = Vec::new();
    for first in (0..total).step_by(100) {
        let frames: Vec<Vec<u8>> = (first..first + 100).map(frame).collect();
        let views: Vec<&[u8]> = frames.iter().map(Vec::as_slice).collect();
        let mut offset = 0;
        let deadline = Instant::now() + Duration::from_secs(2);
        while offset < views.len() && Instant::now() < deadline {
            offset += xsk.send_batch(&views[offset..]).expect("send");
        }
        assert_eq!(offset, views.len(), "every frame queued");
        received.extend(receive_numbered(&mut rx, frames.len()).0);
    }
    assert!(
        xsk.complete(Duration::from_secs(2)).expect("complete"),
        "every frame reported sent"
    );
    assert_eq!(received.len(), total as usize, "every frame once");
    for (seq, bytes) in (0..total).zip(&received) {
        assert_eq!(bytes, &frame(seq), "frame {seq} intact and in order");
    }
    let stats = xsk.stats();
    assert_eq!(stats.tx_queued, u64::from(total));
    assert_eq!(stats.tx_completed, u64::from(total));
    assert_eq!(stats.tx_failed, 0);
    assert_eq!(xsk.in_flight(), 0);
    // Copy mode sends only from a system call: the kernel keeps asking
    // for one, so both ways every batch kicked at least once.
    assert!(stats.tx_kicks >= 10, "{stats:?}");
    let kernel = xsk.kernel_stats().expect("read XDP_STATISTICS");
    assert_eq!(kernel.tx_invalid_descs, 0, "{kernel:?}");

    // A frame longer than the link takes is refused, typed, not queued.
    let long = vec![0u8; 1515];
    assert!(matches!(
        xsk.send_batch(&[&long]),
        Err(XdpError::Io(IoError::FrameTooLong {
            len: 1515,
            max: 1514
        }))
    ));
    assert!(matches!(
        xsk.send_batch(&[&[0u8; 10]]),
        Err(XdpError::FrameTooShort { len: 10 })
    ));
    assert_eq!(xsk.stats().tx_failed, 2);
    assert_eq!(xsk.stats().tx_queued, u64::from(total));
}

#[test]
fn dropping_the_socket_detaches_the_program_and_traffic_passes_again() {
    let Some((ns_a, ns_b, pair)) = test_bed() else {
        return;
    };
    assert!(!has_xdp_program(&ns_b, &pair.b));
    let xsk = ns_b
        .run(|| XdpSocket::open(&pair.b, 0, &config(AttachMode::Auto)))
        .unwrap()
        .expect("open the AF_XDP socket");
    assert!(has_xdp_program(&ns_b, &pair.b));
    // A second socket finds the interface taken.
    let second = ns_b
        .run(|| XdpSocket::open(&pair.b, 0, &config(AttachMode::Auto)))
        .unwrap();
    assert!(
        matches!(second, Err(XdpError::InterfaceBusy { ref interface }) if *interface == pair.b),
        "{second:?}"
    );
    drop(xsk);
    assert!(!has_xdp_program(&ns_b, &pair.b), "detached on drop");

    let mut rx = ns_b
        .run(|| PacketRx::open(&pair.b, &RxConfig::default()))
        .unwrap()
        .expect("open AF_PACKET RX");
    let mut tx = ns_a
        .run(|| PacketTx::open(&pair.a, &TxConfig::default()))
        .unwrap()
        .expect("open AF_PACKET TX");
    let frames: Vec<Vec<u8>> = (0..20).map(frame).collect();
    send_all(&mut tx, &frames);
    let got = receive_numbered(&mut rx, frames.len()).0;
    assert_eq!(got, frames, "the stack's path sees every frame again");
}

#[test]
fn a_panic_with_the_socket_open_leaves_no_program() {
    let Some((_ns_a, ns_b, pair)) = test_bed() else {
        return;
    };
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        ns_b.run(|| {
            let _xsk = XdpSocket::open(&pair.b, 0, &config(AttachMode::Skb))
                .expect("open the AF_XDP socket");
            assert!(has_xdp_program(&ns_b, &pair.b));
            panic!("deliberate panic with the socket open");
        })
    }));
    assert!(outcome.is_err(), "the closure panicked");
    assert!(!has_xdp_program(&ns_b, &pair.b), "detached by unwinding");
}

#[test]
fn bad_input_is_refused_with_typed_errors() {
    let Some((_ns_a, ns_b, pair)) = test_bed() else {
        return;
    };
    let missing = ns_b
        .run(|| XdpSocket::open("pspat-nothere", 0, &XdpConfig::default()))
        .unwrap();
    assert!(
        matches!(missing, Err(XdpError::Io(IoError::NoSuchInterface(ref n))) if n == "pspat-nothere"),
        "{missing:?}"
    );
    let bad_name = XdpSocket::open("a/b", 0, &XdpConfig::default());
    assert!(
        matches!(bad_name, Err(XdpError::Io(IoError::BadInterfaceName(_)))),
        "{bad_name:?}"
    );
    let queue = ns_b
        .run(|| XdpSocket::open(&pair.b, 5, &XdpConfig::default()))
        .unwrap();
    assert!(
        matches!(
            queue,
            Err(XdpError::NoSuchQueue {
                queue: 5,
                queues: Some(1),
                ..
            })
        ),
        "{queue:?}"
    );
    for frame_size in [3000, 1000, 8192] {
        let config = XdpConfig {
            frame_size,
            ..XdpConfig::default()
        };
        let refused = ns_b.run(|| XdpSocket::open(&pair.b, 0, &config)).unwrap();
        assert!(
            matches!(refused, Err(XdpError::Io(IoError::BadConfig(_)))),
            "frame size {frame_size}: {refused:?}"
        );
    }
    let zero_copy = XdpConfig {
        zero_copy: true,
        attach: AttachMode::Auto,
        ..XdpConfig::default()
    };
    let refused = ns_b
        .run(|| XdpSocket::open(&pair.b, 0, &zero_copy))
        .unwrap();
    assert!(
        matches!(refused, Err(XdpError::ZeroCopyUnsupported { .. })),
        "veth offers no zero-copy: {refused:?}"
    );
    assert!(
        !has_xdp_program(&ns_b, &pair.b),
        "no program left by a failed open"
    );
    // The interface is still usable after all these refusals.
    let xsk = ns_b
        .run(|| XdpSocket::open(&pair.b, 0, &XdpConfig::default()))
        .unwrap()
        .expect("open after the refusals");
    assert_eq!(xsk.queue(), 0);
}

#[test]
fn a_removed_link_is_reported_lost_on_every_later_call() {
    let Some((_ns_a, ns_b, pair)) = test_bed() else {
        return;
    };
    let mut xsk = ns_b
        .run(|| XdpSocket::open(&pair.b, 0, &XdpConfig::default()))
        .unwrap()
        .expect("open the AF_XDP socket");
    pair.remove().expect("remove the pair");
    for _ in 0..2 {
        let outcome = xsk.recv_with(Duration::from_millis(50), |_| {});
        assert!(
            matches!(outcome, Err(XdpError::Io(ref e)) if e.is_link_lost()),
            "{outcome:?}"
        );
    }
    let frame = frame(0);
    let outcome = xsk.send_batch(&[&frame]);
    assert!(
        matches!(outcome, Err(XdpError::Io(ref e)) if e.is_link_lost()),
        "{outcome:?}"
    );
    assert_eq!(xsk.stats().tx_queued, 0, "nothing queued on a lost link");
}

/// Pool frames sent by a sending-only socket on `a` (each picked twice in
/// a row, as a duplicated packet is) arrive through `recv_into` on `b`
/// in pool frames, intact and in order; `a` has no XDP program, so frames
/// sent into `a` still reach its AF_PACKET socket; a pick beyond the
/// frames is refused, typed and counted.
#[test]
fn picked_pool_frames_cross_from_a_sender_into_pool_frames() {
    use pspat_io::xdp::XdpSender;
    use pspat_io::FramePool;
    let Some((ns_a, ns_b, pair)) = test_bed() else {
        return;
    };
    let mut tx = ns_a
        .run(|| XdpSender::open(&pair.a, 0, &XdpConfig::default()))
        .unwrap()
        .expect("open the sending socket");
    assert!(
        !has_xdp_program(&ns_a, &pair.a),
        "a sender attaches no program"
    );
    let mut rx = ns_b
        .run(|| XdpSocket::open(&pair.b, 0, &XdpConfig::default()))
        .unwrap()
        .expect("open the receiving socket");
    let mut pool = FramePool::new(512, 2048).expect("pool");
    let arena = std::sync::Arc::clone(pool.arena());
    let mut frames = Vec::new();
    for seq in 0..100 {
        let mut token = pool.alloc().expect("a free frame");
        arena.write(&mut token, &frame(seq)).expect("write");
        frames.push(token);
    }
    let picks: Vec<u32> = (0..100u32).flat_map(|i| [i, i]).collect();
    let mut at = 0;
    let deadline = Instant::now() + Duration::from_secs(2);
    while at < picks.len() && Instant::now() < deadline {
        at += tx
            .send_frames_picked(&arena, &frames, &picks[at..])
            .expect("send");
    }
    assert_eq!(at, picks.len(), "every pick queued");
    assert!(tx.complete(Duration::from_secs(2)).expect("complete"));
    let mut got = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(2);
    while got.len() < picks.len() && Instant::now() < deadline {
        rx.recv_into(Duration::from_millis(20), &mut pool, &mut got)
            .expect("receive");
    }
    let seqs: Vec<u32> = got
        .iter()
        .filter_map(|f| sequence_of(arena.bytes(f).expect("bytes")))
        .collect();
    let want: Vec<u32> = (0..100u32).flat_map(|i| [i, i]).collect();
    assert_eq!(seqs, want, "each frame twice, in order");
    for (token, &seq) in got.iter().zip(&want) {
        assert_eq!(arena.bytes(token).expect("bytes"), frame(seq).as_slice());
    }
    assert_eq!(tx.stats().tx_queued, 200);
    assert_eq!(rx.stats().rx_no_frame, 0);
    assert_eq!(rx.stats().rx_too_long, 0);
    assert!(matches!(
        tx.send_frames_picked(&arena, &frames, &[100]),
        Err(XdpError::Io(IoError::BadPick {
            pick: 100,
            frames: 100
        }))
    ));
    assert_eq!(tx.stats().tx_failed, 1);

    // Frames sent into `a` pass to its stack: an AF_PACKET socket sees them.
    let v2 = RxConfig {
        ring: RxRing::V2,
        ..RxConfig::default()
    };
    let mut packet_rx = ns_a
        .run(|| PacketRx::open(&pair.a, &v2))
        .unwrap()
        .expect("open AF_PACKET RX");
    let mut packet_tx = ns_b
        .run(|| PacketTx::open(&pair.b, &TxConfig::default()))
        .unwrap()
        .expect("open AF_PACKET TX");
    let back: Vec<Vec<u8>> = (0..10).map(frame).collect();
    send_all(&mut packet_tx, &back);
    let (received, _) = receive_numbered(&mut packet_rx, back.len());
    assert_eq!(received, back, "the sender's interface still receives");
}
