//! The per-packet paths allocate nothing: frame alloc/write/release/
//! reclaim/recycle, parsing, hashing, and UDP batch send and receive.
//!
//! `allocation-counter` installs a counting global allocator in this test
//! binary and counts per thread.
mod common;

use std::time::Duration;

use pspat_io::parse::{
    ecn_capable, ecn_capable_parsed, mark_ce, parse_frame, FlowKeyKind, ParseLimits, ParseStats,
};
use pspat_io::udp::{RecvMeta, Timestamps, UdpBatchSocket};
use pspat_io::FramePool;

#[test]
fn the_counter_is_active() {
    let probe = allocation_counter::measure(|| {
        std::hint::black_box(vec![1u8; 16]);
    });
    assert!(
        probe.count_total >= 1,
        "the counting allocator is not active"
    );
}

#[test]
fn frame_cycles_allocate_nothing() {
    let mut pool = FramePool::new(64, 2048).unwrap();
    let arena = std::sync::Arc::clone(pool.arena());
    let packet = common::udp4(1, 2, &[9; 100]);
    let info = allocation_counter::measure(|| {
        for _ in 0..10_000 {
            let mut frame = pool.alloc().unwrap();
            arena.write(&mut frame, &packet).unwrap();
            let cookie = arena.release(frame).unwrap();
            let frame = arena.reclaim(cookie).unwrap();
            assert_eq!(arena.bytes(&frame).unwrap().len(), packet.len());
            pool.recycle(frame).unwrap();
        }
    });
    assert_eq!(info.count_total, 0);
}

#[test]
fn parsing_and_hashing_allocate_nothing() {
    let mut frames: Vec<Vec<u8>> = common::malformed().into_iter().map(|c| c.1).collect();
    frames.push(common::udp4(1000, 2000, b"payload"));
    frames.push(common::ipv6_ext_chain(3));
    let limits = ParseLimits::default();
    let mut stats = ParseStats::default();
    let info = allocation_counter::measure(|| {
        for frame in &frames {
            if let Ok(key) = stats.parse(frame, &limits) {
                std::hint::black_box(key.project(FlowKeyKind::SrcIp).hash(7));
            }
            std::hint::black_box(parse_frame(frame, &limits).ok());
        }
    });
    assert_eq!(info.count_total, 0);
    assert_eq!(stats.parsed, 2);
}

#[test]
fn ecn_reads_and_marks_allocate_nothing() {
    let mut frames: Vec<Vec<u8>> = common::malformed().into_iter().map(|c| c.1).collect();
    let mut ect = common::udp4(1000, 2000, b"payload");
    ect[15] |= 2;
    frames.push(ect);
    frames.push(common::ipv6_ext_chain(3));
    let limits = ParseLimits::default();
    let mut marked = 0;
    let info = allocation_counter::measure(|| {
        for frame in &mut frames {
            let capable = ecn_capable(frame);
            if let Ok(key) = parse_frame(frame, &limits) {
                assert_eq!(ecn_capable_parsed(frame, &key), capable);
            }
            if mark_ce(frame) {
                marked += 1;
            }
        }
    });
    assert_eq!(info.count_total, 0);
    assert_eq!(marked, 1);
}

#[test]
fn udp_batches_allocate_nothing() {
    let sender = UdpBatchSocket::bind("127.0.0.1:0", Timestamps::None).unwrap();
    let receiver = UdpBatchSocket::bind("127.0.0.1:0", Timestamps::Kernel).unwrap();
    sender.connect(receiver.local_addr().unwrap()).unwrap();
    let datagrams = [&[1u8; 64][..]; 16];
    let mut storage = [[0u8; 128]; 16];
    let mut meta = [RecvMeta::default(); 16];
    let mut received = 0;
    let info = allocation_counter::measure(|| {
        for _ in 0..8 {
            assert_eq!(sender.send_batch(&datagrams).unwrap(), 16);
            let [a, b, c, d, e, f, g, h, i, j, k, l, m, n, o, p] = &mut storage;
            let mut buffers: [&mut [u8]; 16] = [a, b, c, d, e, f, g, h, i, j, k, l, m, n, o, p];
            let mut got = 0;
            for _ in 0..50 {
                if got == 16 {
                    break;
                }
                got += receiver
                    .recv_batch(
                        &mut buffers[got..],
                        &mut meta[got..],
                        Duration::from_millis(100),
                    )
                    .unwrap();
            }
            received += got;
        }
    });
    assert_eq!(received, 128);
    assert_eq!(info.count_total, 0);
}
